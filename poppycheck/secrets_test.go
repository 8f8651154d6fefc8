package poppycheck_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// TestReportHoldsNoSecret: an interactive run's report, as JSON and as
// the table, holds no token, proof, assertion, code or credential the run
// sent or received, only their fingerprints.
func TestReportHoldsNoSecret(t *testing.T) {
	srv := poppytest.NewServer(t, richOptions())
	noSecret(t, srv, runAgainst(t, srv, &person{srv: srv}), false)
	// Failures show their request and answer: a token response and a
	// Set-Cookie among them.
	bad := poppytest.NewServer(t, &poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	bad.Tokens().SetType("Bearer")
	rep := runAgainst(t, bad, nil)
	if len(rep.Failed()) < 2 {
		t.Fatalf("want two failures with evidence, got %d", len(rep.Failed()))
	}
	noSecret(t, bad, rep, true)
}

func noSecret(t *testing.T, srv *poppytest.Server, rep *poppycheck.Report, evidence bool) {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	text := string(b) + table.String()
	var secrets []string
	for _, r := range srv.Requests() {
		secrets = append(secrets, r.AccessToken)
		if r.Proof != nil {
			secrets = append(secrets, r.Proof.Compact)
		}
		if r.Assertion != nil {
			secrets = append(secrets, r.Assertion.Compact)
		}
		if r.ClientAssertion != nil {
			secrets = append(secrets, r.ClientAssertion.Compact)
		}
		for _, k := range []string{"refresh_token", "code", "code_verifier", "device_code", "token", "assertion"} {
			secrets = append(secrets, r.Form.Get(k))
		}
		if strings.Contains(string(r.Body), `"refresh_token"`) {
			t.Logf("request %d carries a refresh_token in its body", r.Index)
		}
	}
	for _, c := range srv.Sessions().Cookies() {
		secrets = append(secrets, c.Value)
	}
	secrets = append(secrets, "correct horse", srv.SignIn().LastCode())
	n := 0
	for _, s := range secrets {
		if len(s) < 6 {
			continue
		}
		n++
		if strings.Contains(text, s) {
			t.Errorf("the report shows a secret in clear: %.12s…", s)
		}
	}
	if n < 20 {
		t.Fatalf("only %d secrets to look for: the run did too little", n)
	}
	if evidence && !strings.Contains(text, "«sha256:") {
		t.Error("the report shows no fingerprint at all")
	}
	_ = poppycheck.Fingerprint
}
