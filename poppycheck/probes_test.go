package poppycheck_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// signInBodies returns the Mediated Sign-In requests the fake received and
// every credential value they carried.
func signInBodies(t *testing.T, srv *poppytest.Server) (n int, values []string) {
	t.Helper()
	for _, r := range srv.RequestsTo(poppytest.EndpointSignIn) {
		n++
		var b struct {
			Credentials map[string]string `json:"credentials"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("a Mediated Sign-In body the fake logged isn't JSON: %v", err)
		}
		for _, v := range b.Credentials {
			values = append(values, v)
		}
	}
	return n, values
}

// noCredentials fails when a made-up credential reaches the report, as
// JSON or as the table.
func noCredentials(t *testing.T, rep *poppycheck.Report, values []string) {
	t.Helper()
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if strings.Contains(string(js), v) || strings.Contains(b.String(), v) {
			t.Errorf("a made-up credential reached the report: %s", poppycheck.Fingerprint(v))
		}
	}
	if strings.Contains(string(js), "@poppycheck.invalid") {
		t.Error("a made-up email address reached the report")
	}
}

// TestMediatedRateLimitProbe: with Options.FailedSignIns, the check makes
// failed Mediated Sign-Ins in a row on one Session with made-up
// credentials and reports CO-4.7-06 passed when the 6th is refused with
// 429 and Retry-After (the default fake), failed when it isn't (no limit).
// The credentials are random, name an .invalid address, and never reach
// the report.
func TestMediatedRateLimitProbe(t *testing.T) {
	t.Run("limited", func(t *testing.T) {
		srv := poppytest.NewServer(t, nil)
		rep := runWith(t, srv, &poppycheck.Options{FailedSignIns: true})
		// CO-4.7-06
		r, _ := rep.Result("CO-4.7-06")
		if r.Status != poppycheck.Passed {
			t.Fatalf("CO-4.7-06: %s (%s%s), want passed", r.Status, r.Detail, r.Reason)
		}
		if !strings.Contains(r.Detail, "attempt 6 of 6") || !strings.Contains(r.Detail, "429") {
			t.Errorf("CO-4.7-06 detail: %s", r.Detail)
		}
		n, values := signInBodies(t, srv)
		if n != poppycheck.MediatedAttempts {
			t.Errorf("%d Mediated Sign-In requests, want %d", n, poppycheck.MediatedAttempts)
		}
		reqs := srv.RequestsTo(poppytest.EndpointSignIn)
		sessions := map[string]bool{}
		for _, q := range reqs {
			sessions[q.Header.Get("Authorization")] = true
		}
		if len(sessions) != 1 {
			t.Errorf("the attempts used %d Session Tokens, want one Session", len(sessions))
		}
		if last := reqs[len(reqs)-1]; last.Status != 429 {
			t.Errorf("the last attempt answered %d, want 429", last.Status)
		}
		for _, v := range values {
			if strings.Contains(v, "@") && !strings.HasSuffix(v, "@poppycheck.invalid") {
				t.Errorf("a made-up email outside .invalid: %s", poppycheck.Fingerprint(v))
			}
		}
		noCredentials(t, rep, values)
		if r, _ := rep.Result("CO-4.3-21"); r.Status != poppycheck.Passed {
			t.Errorf("CO-4.3-21: %s, want passed by the 429", r.Status)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{MediatedFailuresPerMinute: -1}})
		rep := runWith(t, srv, &poppycheck.Options{FailedSignIns: true})
		// CO-4.7-06
		r, _ := rep.Result("CO-4.7-06")
		if r.Status != poppycheck.Failed {
			t.Fatalf("CO-4.7-06: %s (%s%s), want failed", r.Status, r.Detail, r.Reason)
		}
		if r.Evidence == nil || !strings.HasSuffix(r.Evidence.URL, "/poppy/sign-in") || r.Evidence.Status != 200 {
			t.Errorf("CO-4.7-06 evidence: %+v", r.Evidence)
		}
		n, values := signInBodies(t, srv)
		if n != poppycheck.MediatedAttempts {
			t.Errorf("%d Mediated Sign-In requests, want %d (bounded)", n, poppycheck.MediatedAttempts)
		}
		noCredentials(t, rep, values)
		if len(rep.Failed()) != 1 {
			t.Errorf("%d rules failed, want CO-4.7-06 alone: %v", len(rep.Failed()), rep.Failed())
		}
	})
	t.Run("off by default", func(t *testing.T) {
		srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{MediatedFailuresPerMinute: -1}})
		rep := runAgainst(t, srv, nil)
		r, _ := rep.Result("CO-4.7-06")
		if r.Status != poppycheck.NotObserved || r.Reason != poppycheck.Conditional()["CO-4.7-06"] {
			t.Errorf("CO-4.7-06 without FailedSignIns: %s (%q)", r.Status, r.Reason)
		}
		if n, _ := signInBodies(t, srv); n != 0 {
			t.Errorf("%d Mediated Sign-In requests without FailedSignIns, want none", n)
		}
	})
}

// TestOperationProbe: with Options.Propose in an interactive run, the
// check proposes the action, asks the person, confirms it and reads it
// while in_progress, and reports CO-OPS6-01 passed when every in_progress
// answer carries Retry-After, failed when one doesn't.
func TestOperationProbe(t *testing.T) {
	t.Run("retry-after", func(t *testing.T) {
		o := slowOps(false)
		srv := poppytest.NewServer(t, &o)
		opts := proposeExchange(srv)
		rep := runWith(t, srv, opts)
		// CO-OPS6-01
		r, _ := rep.Result("CO-OPS6-01")
		if r.Status != poppycheck.Passed {
			t.Fatalf("CO-OPS6-01: %s (%s%s), want passed", r.Status, r.Detail, r.Reason)
		}
		if r.Observations < 2 {
			t.Errorf("CO-OPS6-01 seen %d times, want the confirm and a read", r.Observations)
		}
		p := opts.Person.(*person)
		if len(p.approved) != 1 || p.approved[0].Summary == "" || p.approved[0].Company == "" {
			t.Errorf("the person was asked to approve %+v", p.approved)
		}
		if got := len(srv.Operations().All()); got != 1 {
			t.Errorf("%d operations proposed, want 1", got)
		}
		for _, f := range rep.Failed() {
			t.Errorf("%s failed: %s", f.Rule, f.Detail)
		}
	})
	t.Run("no retry-after", func(t *testing.T) {
		o := slowOps(true)
		srv := poppytest.NewServer(t, &o)
		rep := runWith(t, srv, proposeExchange(srv))
		// CO-OPS6-01
		r, _ := rep.Result("CO-OPS6-01")
		if r.Status != poppycheck.Failed {
			t.Fatalf("CO-OPS6-01: %s (%s%s), want failed", r.Status, r.Detail, r.Reason)
		}
		if r.Evidence == nil || !strings.HasSuffix(r.Evidence.URL, "/confirm") {
			t.Errorf("CO-OPS6-01 evidence: %+v", r.Evidence)
		}
	})
	t.Run("off by default", func(t *testing.T) {
		o := slowOps(true)
		srv := poppytest.NewServer(t, &o)
		rep := runAgainst(t, srv, &person{srv: srv})
		r, _ := rep.Result("CO-OPS6-01")
		if r.Status != poppycheck.NotObserved || r.Reason != poppycheck.Conditional()["CO-OPS6-01"] {
			t.Errorf("CO-OPS6-01 without Propose: %s (%q)", r.Status, r.Reason)
		}
		if got := len(srv.Operations().All()); got != 0 {
			t.Errorf("%d operations proposed without Propose, want none", got)
		}
	})
}
