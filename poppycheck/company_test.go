package poppycheck_test

// Companies of other makes: the fake seen through a layer that answers or
// changes what the fake would, to show the check what the spec allows (or
// a rule broken) that the fake itself never does. A check that others
// point at their own Companies must fail none of what the spec allows.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// company is the fake behind a layer: answer may answer a request in the
// fake's place (nil: the fake answers), edit may change the fake's answer.
// It records every URL the check asked for.
type company struct {
	srv *poppytest.Server
	// rewrite, if set, changes the request the fake gets (a copy).
	rewrite func(*http.Request) *http.Request
	answer  func(*http.Request) *http.Response
	edit    func(*http.Request, *http.Response)

	mu    sync.Mutex
	asked []*url.URL
}

func (c *company) RoundTrip(req *http.Request) (*http.Response, error) {
	u := *req.URL
	c.mu.Lock()
	c.asked = append(c.asked, &u)
	c.mu.Unlock()
	if c.answer != nil {
		if resp := c.answer(req); resp != nil {
			if err := req.Context().Err(); err != nil {
				return nil, err // held until the check gave up
			}
			return resp, nil
		}
	}
	if c.rewrite != nil {
		req = c.rewrite(req)
	}
	resp, err := c.srv.Client().Transport.RoundTrip(req)
	if err == nil && c.edit != nil {
		c.edit(req, resp)
	}
	return resp, err
}

func (c *company) client() *http.Client { return &http.Client{Transport: c} }

// hosts returns the hosts the check asked for.
func (c *company) hosts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, u := range c.asked {
		if !slices.Contains(out, u.Hostname()) {
			out = append(out, u.Hostname())
		}
	}
	return out
}

// body reads a request's body again (the check's requests can be
// replayed: GetBody).
func body(req *http.Request) []byte {
	if req.GetBody == nil {
		return nil
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return b
}

// form reads a request's form body.
func form(req *http.Request) url.Values {
	f, _ := url.ParseQuery(string(body(req)))
	return f
}

// claims decodes a JWT's claims, unverified.
func claims(jwt string) map[string]any {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return nil
	}
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// answerJSON is a JSON answer.
func answerJSON(status int, body string, hdr ...string) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

// editBody rewrites an answer's body.
func editBody(resp *http.Response, f func([]byte) []byte) {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	b = f(b)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	resp.Header.Del("ETag")
}

// addMember adds a member, written as raw JSON, to a JSON object body.
func addMember(b []byte, name, rawValue string) []byte {
	i := bytes.LastIndexByte(b, '}')
	if i < 0 {
		return b
	}
	return append(append(append([]byte{}, b[:i]...), []byte(`,"`+name+`":`+rawValue)...), b[i:]...)
}

// noFailures fails the test for every rule the report failed.
func noFailures(t *testing.T, rep *poppycheck.Report) {
	t.Helper()
	for _, r := range rep.Failed() {
		t.Errorf("%s failed: %s (%s)", r.Rule, r.Detail, r.Step)
	}
}

// failedSet is the rules the report failed.
func failedSet(rep *poppycheck.Report) []string {
	var out []string
	for _, r := range rep.Failed() {
		out = append(out, r.Rule)
	}
	return out
}

// TestClientAssertionAudience: a Company that takes a client assertion
// only with aud = its token endpoint, at every endpoint it goes to, as
// oidc-provider does (A-03 leaves aud open; the SDK sends the token
// endpoint everywhere, and so must the check), fails nothing: the device
// authorization requests without a User and, in an interactive run, the
// Device Sign-In and the revocation.
func TestClientAssertionAudience(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"mediated"}, DeviceInterval: time.Second}})
	var auds []string
	c := &company{srv: srv, answer: func(req *http.Request) *http.Response {
		if req.Method != http.MethodPost || req.URL.Host != "auth.example.test" {
			return nil
		}
		ca := form(req).Get("client_assertion")
		if ca == "" {
			return nil
		}
		aud, _ := claims(ca)["aud"].(string)
		auds = append(auds, req.URL.Path+" "+aud)
		if aud != srv.EndpointURL(poppytest.EndpointToken) {
			return answerJSON(http.StatusUnauthorized, `{"error":"invalid_client","error_description":"aud must be the token endpoint"}`)
		}
		return nil
	}}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: c.client(), Person: &person{srv: srv}})
	noFailures(t, rep)
	for _, path := range []string{"/oauth/device", "/oauth/revoke", "/oauth/token"} {
		if !slices.ContainsFunc(auds, func(a string) bool { return strings.HasPrefix(a, path+" ") }) {
			t.Errorf("no client assertion was sent to %s: %v", path, auds)
		}
	}
}

// TestSignedOutProbes: a Company whose OpenAPI description can't say which
// GETs need a sign-in (an http security scheme has no scopes), whose
// conversations and operations need a signed-in Session, answers a
// signed-out Session's requests there with 403 sign_in_required, as spec 6
// has it: the check takes that for what it is, tries another GET, and fails
// nothing; signed in (interactive), it walks the conversation.
func TestSignedOutProbes(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"device", "mediated"}}})
	signIn := func() *http.Response {
		return answerJSON(http.StatusForbidden, `{"error":"sign_in_required"}`, "WWW-Authenticate", `DPoP error="sign_in_required"`)
	}
	signedOut := func(req *http.Request) bool {
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "DPoP ")
		info, ok := srv.Tokens().Get(tok)
		return ok && !info.SignedIn
	}
	c := &company{srv: srv,
		answer: func(req *http.Request) *http.Response {
			if strings.HasPrefix(req.URL.Path, "/poppy/conversations") && signedOut(req) ||
				strings.HasPrefix(req.URL.Path, "/poppy/operations") && signedOut(req) {
				return signIn()
			}
			return nil
		},
		edit: func(req *http.Request, resp *http.Response) {
			if req.URL.Path == "/openapi.json" {
				editBody(resp, func(b []byte) []byte {
					var doc map[string]any
					if json.Unmarshal(b, &doc) != nil {
						return b
					}
					// No scopes anywhere: the description no longer says
					// GET /orders needs a sign-in.
					var strip func(any)
					strip = func(v any) {
						switch x := v.(type) {
						case map[string]any:
							for k, e := range x {
								if k == "security" {
									x[k] = []any{map[string]any{"poppySession": []any{}}}
									continue
								}
								strip(e)
							}
						case []any:
							for _, e := range x {
								strip(e)
							}
						}
					}
					strip(doc)
					out, _ := json.Marshal(doc)
					return out
				})
			}
		}}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: c.client(), Person: &person{srv: srv}})
	noFailures(t, rep)
	for _, id := range []string{"CO-6-03", "CO-6-10", "CO-7.3-01"} {
		if r, _ := rep.Result(id); r.Status != poppycheck.Passed {
			t.Errorf("%s: %s (%s)", id, r.Status, r.Reason)
		}
	}
}

// TestProbeTokensStayApart: a Company that answers the probe for a scope a
// signed-out Session lacks with a token of its own making breaks CO-4.3-16
// and nothing else: the token the probe got never replaces the Session
// token the rest of the run uses.
func TestProbeTokensStayApart(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	c := &company{srv: srv, answer: func(req *http.Request) *http.Response {
		if req.Method == http.MethodPost && req.URL.Path == "/oauth/token" {
			if f := form(req); f.Get("scope") == "poppy:read" && f.Get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer" {
				return answerJSON(http.StatusOK, `{"access_token":"pst_madeUpByTheLayer0123456789","token_type":"DPoP","expires_in":3600,"scope":"poppy:read","session_id":"`+f.Get("session_id")+`","signed_in":false}`,
					"Cache-Control", "no-store")
			}
		}
		return nil
	}}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: c.client()})
	// CO-4.3-16
	if got := failedSet(rep); !slices.Equal(got, []string{"CO-4.3-16"}) {
		t.Errorf("failed %v, want [CO-4.3-16]", got)
		noFailures(t, rep)
	}
}

// TestFreshAgentPerRun: two runs against one Company, which caches a
// client's metadata for a minute, each see it fetch the client metadata
// (CO-4.1-01): each agent has a client_id of its own.
func TestFreshAgentPerRun(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	var ids []string
	for range 2 {
		rep := runWith(t, srv, &poppycheck.Options{})
		ids = append(ids, rep.ClientID)
		// CO-4.1-01
		if r, _ := rep.Result("CO-4.1-01"); r.Status != poppycheck.Passed {
			t.Errorf("run %d: CO-4.1-01 %s: %s", len(ids), r.Status, r.Detail)
		}
	}
	if ids[0] == ids[1] {
		t.Errorf("two agents on one base URL share the client_id %s", ids[0])
	}
}

// TestCO_4_7_07_EchoedCredentials: a Mediated Sign-In answer that carries
// a credential sent, as it is, JSON-escaped, or a short one as a word of
// its own, fails CO-4.7-07; the same answers without it pass, and a short
// credential that only occurs inside another word (an ID, a date) is no
// echo. The check of the opt-in probe of failed sign-ins too.
func TestCO_4_7_07_EchoedCredentials(t *testing.T) {
	pin := "4711"
	accounts := []poppytest.Account{{ID: "acct_1", Credentials: map[string]string{"email": "user@example.test", "password": "correct horse"}},
		{ID: "acct_pin", Credentials: map[string]string{"email": "pin@example.test", "password": pin}}}
	for _, c := range []struct {
		name, password, member string
		fails                  bool
	}{
		{"none", "correct horse", `"a note"`, false},
		{"plain", "correct horse", `"correct horse"`, true},
		{"escaped", "correct horse", `"\u0063orrect horse"`, true},
		{"escaped slash and case", "correct horse", `"\u0063orr\u0065ct\u0020h\u006Frse"`, true},
		{"short, a word", pin, `"PIN 4711 accepted"`, true},
		{"short, inside an ID", pin, `"sgn_a4711b 2026-04-11T00:00:00Z"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"direct", "device"}, Accounts: accounts}})
			layer := &company{srv: srv, edit: func(req *http.Request, resp *http.Response) {
				if req.URL.Path == "/poppy/sign-in" {
					editBody(resp, func(b []byte) []byte { return addMember(b, "note", c.member) })
				}
			}}
			p := &typist{person: person{srv: srv}, answers: map[string]string{"email": "user@example.test", "password": c.password}}
			if c.password == pin {
				p.answers["email"] = "pin@example.test"
			}
			rep := runWith(t, srv, &poppycheck.Options{HTTPClient: layer.client(), Person: p})
			r, _ := rep.Result("CO-4.7-07")
			// CO-4.7-07
			if want := map[bool]poppycheck.Status{true: poppycheck.Failed, false: poppycheck.Passed}[c.fails]; r.Status != want {
				t.Errorf("CO-4.7-07: %s (%s%s), want %s", r.Status, r.Detail, r.Reason, want)
			}
			if got := failedSet(rep); c.fails && !slices.Equal(got, []string{"CO-4.7-07"}) || !c.fails && len(got) > 0 {
				t.Errorf("failed %v", got)
			}
		})
	}
	t.Run("made-up credentials, escaped", func(t *testing.T) {
		srv := poppytest.NewServer(t, nil)
		layer := &company{srv: srv, edit: func(req *http.Request, resp *http.Response) {
			if req.URL.Path != "/poppy/sign-in" {
				return
			}
			var sent struct {
				Credentials map[string]string `json:"credentials"`
			}
			_ = json.Unmarshal(body(req), &sent)
			email := sent.Credentials["email"]
			esc := `"` + strings.ReplaceAll(email, "@", `\u0040`) + `"`
			editBody(resp, func(b []byte) []byte { return addMember(b, "account", esc) })
		}}
		rep := runWith(t, srv, &poppycheck.Options{HTTPClient: layer.client(), FailedSignIns: true})
		// CO-4.7-07
		if r, _ := rep.Result("CO-4.7-07"); r.Status != poppycheck.Failed {
			t.Errorf("CO-4.7-07: %s (%s%s), want failed", r.Status, r.Detail, r.Reason)
		}
	})
}

// typist is a person who types the answers given, by field name, and the
// fake's one-time code.
type typist struct {
	person
	answers map[string]string
}

func (p *typist) Ask(ctx context.Context, q poppycheck.Question) (string, error) {
	if v, ok := p.answers[q.Name]; ok {
		return v, nil
	}
	return p.person.Ask(ctx, q)
}

// TestTypedValuesNeverShown: what a person types in an interactive run, a
// 7-character password and a one-time code of six digits among it, never
// reaches the report, as JSON or as the table, not even as a fingerprint
// (which would give a short value away), though the failures show the very
// requests that carried them.
func TestTypedValuesNeverShown(t *testing.T) {
	creds := map[string]string{"email": "ab@example.test", "password": "hunter2"}
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"direct", "device"},
		Accounts: []poppytest.Account{{ID: "acct_1", Credentials: creds, RequireCode: true}}}})
	// The layer breaks two rules, so that the report shows the request
	// with the credentials (CO-4.7-07: the password written back) and the
	// one with the code (CO-4.4-06: more scopes granted than asked).
	layer := &company{srv: srv, edit: func(req *http.Request, resp *http.Response) {
		if !strings.HasPrefix(req.URL.Path, "/poppy/sign-in") {
			return
		}
		editBody(resp, func(b []byte) []byte {
			if req.URL.Path == "/poppy/sign-in" {
				return addMember(addMember(b, "note", `"hunter2"`), "again", `"\u0068unter2"`)
			}
			return bytes.Replace(b, []byte(`"scope":"`), []byte(`"scope":"extra:scope `), 1)
		})
	}}
	p := &typist{person: person{srv: srv}, answers: creds}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: layer.client(), Person: p})
	var code string
	for _, m := range srv.SignIn().Outbox() {
		code = m.Code
	}
	if code == "" {
		t.Fatal("no one-time code was sent")
	}
	js, _ := json.Marshal(rep)
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	shown := string(js) + table.String()
	for _, r := range []string{"CO-4.7-07", "CO-4.4-06"} {
		if x, _ := rep.Result(r); x.Status != poppycheck.Failed || x.Evidence == nil || x.Evidence.RequestBody == "" {
			t.Fatalf("%s: %s, evidence %+v: the report doesn't show the request", r, x.Status, x.Evidence)
		}
	}
	for name, v := range map[string]string{"the password": "hunter2", "the email": "ab@example.test", "the one-time code": code} {
		if strings.Contains(shown, v) {
			t.Errorf("the report shows %s", name)
		}
		if strings.Contains(shown, poppycheck.Fingerprint(v)) {
			t.Errorf("the report shows the fingerprint of %s", name)
		}
	}
	// Only what was typed is redacted: the Company's domain, a stretch of
	// the email address, is still shown.
	if r, _ := rep.Result("CO-3-06"); !strings.Contains(r.Detail, `"example.test"`) {
		t.Errorf("CO-3-06: %s", r.Detail)
	}
}

// TestStepStopsAfterTimeouts: a Company that holds every answer of a
// conversation after its start until the check gives up holds two of the
// conversation's requests, not all of them: the step stops after two
// timeouts, and the run goes on.
func TestStepStopsAfterTimeouts(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	var mu sync.Mutex
	held := 0
	c := &company{srv: srv, answer: func(req *http.Request) *http.Response {
		if !strings.HasPrefix(req.URL.Path, "/poppy/conversations/") {
			return nil // the start (POST /poppy/conversations) is answered
		}
		mu.Lock()
		held++
		mu.Unlock()
		<-req.Context().Done() // a trickle that never ends
		return answerJSON(http.StatusGatewayTimeout, `{}`)
	}}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: c.client(), RequestTimeout: 300 * time.Millisecond})
	mu.Lock()
	defer mu.Unlock()
	if held != 2 || !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.Contains(n, `"conversation" stopped: 2 of its requests got no answer`)
	}) {
		t.Errorf("%d requests held (want 2), notes %q", held, rep.Notes)
	}
	if r, _ := rep.Result("CO-5-17"); r.Status != poppycheck.Passed {
		t.Errorf("the run didn't go on after the conversation: CO-5-17 %s (%s)", r.Status, r.Reason)
	}
}

// TestRunDeadline: a Company that holds every answer of its API until the
// check gives up can't hold a run longer than Options.MaxDuration: the run
// ends with the report of what it saw.
func TestRunDeadline(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	c := &company{srv: srv, answer: func(req *http.Request) *http.Response {
		if req.URL.Host != "api.example.test" && req.URL.Host != "mcp.example.test" {
			return nil
		}
		<-req.Context().Done()
		return answerJSON(http.StatusGatewayTimeout, `{}`)
	}}
	// The test's own deadline fails it, rather than hang, if the run
	// isn't bounded.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := poppycheck.NewAgent("https://agent.test/check/")
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", agent.Handler())
	rep, err := poppycheck.Run(ctx, "example.test", &poppycheck.Options{Agent: agent, HTTPClient: c.client(), Clock: srv.Clock(),
		RequestTimeout: time.Hour, MaxDuration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the run outlived the test's own deadline")
	}
	if !strings.Contains(rep.Aborted, "time limit (1s) ran out") {
		t.Errorf("aborted %q", rep.Aborted)
	}
}

// TestAddressRules: URLs in a Company's documents at addresses the SDK
// never connects to (169.254.169.254, the cloud metadata service; 10.0.0.7;
// [::ffff:127.0.0.1], loopback written as IPv6) fail the rule that names
// each, and the check never asks them anything, not even in an
// interactive run that signs out at the revocation endpoint.
func TestAddressRules(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{
		SignIn: poppytest.SignInPolicy{Disable: []string{"device", "mediated"}},
		Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{
			"apis":  []any{map[string]any{"type": "openapi", "url": "https://10.0.0.7/openapi.json", "description": "Orders"}},
			"agent": map[string]any{"protocols": []any{map[string]any{"type": "poppy", "endpoint": "https://[::ffff:127.0.0.1]/poppy/conversations"}}},
		}},
	})
	c := &company{srv: srv, edit: func(req *http.Request, resp *http.Response) {
		if strings.HasPrefix(req.URL.Path, "/.well-known/oauth-authorization-server") {
			editBody(resp, func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"`+srv.EndpointURL(poppytest.EndpointRevoke)+`"`), []byte(`"https://169.254.169.254/latest/revoke"`), 1)
			})
		}
	}}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: c.client(), Person: &person{srv: srv}})
	for rule, addr := range map[string]string{"CO-3.2-04": "169.254.169.254", "CO-3-09": "::ffff:127.0.0.1", "CO-6-02": "10.0.0.7"} {
		r, _ := rep.Result(rule)
		if r.Status != poppycheck.Failed || !strings.Contains(r.Detail, addr) {
			t.Errorf("%s: %s (%s), want failed naming %s", rule, r.Status, r.Detail, addr)
		}
	}
	if got := failedSet(rep); len(got) != 3 {
		t.Errorf("failed %v, want the three rules that name the URLs", got)
	}
	for _, h := range c.hosts() {
		if h == "169.254.169.254" || h == "10.0.0.7" || h == "::ffff:127.0.0.1" {
			t.Errorf("the check asked %s", h)
		}
	}
	if r, _ := rep.Result("CO-4.9-07"); r.Status != poppycheck.NotObserved {
		t.Errorf("CO-4.9-07 (revocation): %s: %s", r.Status, r.Detail)
	}
}

// TestOtherProtocolVersion: a Company whose poppy.json follows another
// major version gets one line naming it, not a list of failures; a newer
// minor version is checked by 0.1's rules, with a note.
func TestOtherProtocolVersion(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "1.0"}})
	rep := runWith(t, srv, &poppycheck.Options{})
	if rep.OtherVersion != "1.0" || !strings.Contains(rep.Aborted, "1.0") || rep.Count(poppycheck.Failed) != 0 || rep.Count(poppycheck.Passed) != 0 {
		t.Errorf("version %q, aborted %q, %d failed, %d passed", rep.OtherVersion, rep.Aborted, rep.Count(poppycheck.Failed), rep.Count(poppycheck.Passed))
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(table.String()), "\n"); n != 0 || !strings.Contains(table.String(), "1.0") {
		t.Errorf("the table, %d lines:\n%s", n+1, table.String())
	}
	newer := poppytest.NewServer(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "0.2"}})
	rep = runWith(t, newer, &poppycheck.Options{})
	noFailures(t, rep)
	if rep.OtherVersion != "" || rep.Aborted != "" || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "0.2") }) {
		t.Errorf("0.2: version %q, aborted %q, notes %q", rep.OtherVersion, rep.Aborted, rep.Notes)
	}
}

// TestHostPort: a Company whose well-known URL has a port (host:port,
// or an https:// URL) is checked there, and its organization.domain is
// compared without the port.
func TestHostPort(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	var first string
	c := &company{srv: srv, rewrite: func(req *http.Request) *http.Request {
		if first == "" {
			first = req.URL.String()
		}
		if req.URL.Port() != "8443" {
			return req
		}
		r := req.Clone(req.Context())
		r.URL.Host = req.URL.Hostname() // the fake serves 443 only
		return r
	}}
	for _, domain := range []string{"example.test:8443", "https://example.test:8443/"} {
		first = ""
		agent, err := poppycheck.NewAgent("https://agent.test/check/")
		if err != nil {
			t.Fatal(err)
		}
		srv.HandleAgent("agent.test", agent.Handler())
		rep, err := poppycheck.Run(context.Background(), domain, &poppycheck.Options{Agent: agent, HTTPClient: c.client(), Clock: srv.Clock()})
		if err != nil {
			t.Fatalf("%s: %v", domain, err)
		}
		noFailures(t, rep)
		if first != "https://example.test:8443/.well-known/poppy.json" || rep.Domain != "example.test:8443" || rep.Aborted != "" {
			t.Errorf("%s: first request %s, domain %q, aborted %q", domain, first, rep.Domain, rep.Aborted)
		}
	}
}

// TestEvidenceShowsClaims: a failure shows, beside the request, the
// decoded header and claims of every JWT it carried (the client and
// Session assertions and the DPoP proof of a token request; a browser
// assertion), never the JWT itself. The client assertion's aud is the
// token endpoint.
func TestEvidenceShowsClaims(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	srv.Tokens().SetType("Bearer")
	rep := runWith(t, srv, &poppycheck.Options{})
	tok, _ := rep.Result("CO-4.2-05")
	web, _ := rep.Result("CO-5-17")
	if tok.Evidence == nil || web.Evidence == nil {
		t.Fatalf("no evidence: %+v %+v", tok, web)
	}
	where := map[string]poppycheck.Signed{}
	for _, s := range append(slices.Clone(tok.Evidence.Signed), web.Evidence.Signed...) {
		where[s.Where+" "+fmt.Sprint(s.Header["typ"])] = s
	}
	ca, sa, proof, ba := where["client_assertion JWT"], where["assertion JWT"], where["DPoP dpop+jwt"], where["assertion poppy-browser+jwt"]
	if ca.Claims["aud"] != srv.EndpointURL(poppytest.EndpointToken) || ca.Claims["iss"] != rep.ClientID || ca.Claims["sub"] != rep.ClientID {
		t.Errorf("client assertion claims %v", ca.Claims)
	}
	if sa.Claims["aud"] != srv.EndpointURL(poppytest.EndpointToken) || sa.Claims["iss"] != rep.ClientID {
		t.Errorf("Session assertion claims %v", sa.Claims)
	}
	if proof.Claims["htm"] != "POST" || proof.Claims["htu"] != srv.EndpointURL(poppytest.EndpointToken) || proof.Header["jwk"] == nil {
		t.Errorf("proof header %v, claims %v", proof.Header, proof.Claims)
	}
	if ba.Claims["aud"] != srv.EndpointURL(poppytest.EndpointBrowserSession) || ba.Claims["session_id"] == nil {
		t.Errorf("browser assertion claims %v", ba.Claims)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`client_assertion: header {"alg":"ES256"`, `"aud":"` + srv.EndpointURL(poppytest.EndpointToken) + `"`, `DPoP: header {"alg":"ES256","jwk":`} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %s", want)
		}
	}
	for _, r := range srv.Requests() {
		for _, jwt := range []string{r.Form.Get("client_assertion"), r.Form.Get("assertion"), r.Header.Get("DPoP")} {
			if jwt != "" && strings.Contains(table.String(), jwt) {
				t.Errorf("the table shows a JWT the check sent")
			}
		}
	}
}

// TestCO_7_5_03_IdleRead: a read with wait=2 on an idle conversation must
// be answered within the wait, with an empty events list. A Company that
// holds it past the wait, or answers it without an events list, fails
// CO-7.5-03; one that answers after the wait, or sooner (CO-7.5-05 lets
// it), passes.
func TestCO_7_5_03_IdleRead(t *testing.T) {
	waitRead := func(req *http.Request) bool {
		return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/events") && req.URL.Query().Get("wait") != ""
	}
	for _, c := range []struct {
		name   string
		opts   poppytest.Options
		answer func(*http.Request) *http.Response
		want   poppycheck.Status
	}{
		{name: "answers after the wait", want: poppycheck.Passed},
		{name: "answers at once", opts: poppytest.Options{Conversations: poppytest.ConversationOptions{MaxWait: 1e6}}, want: poppycheck.Passed},
		{name: "holds past the wait", want: poppycheck.Failed, answer: func(req *http.Request) *http.Response {
			if !waitRead(req) {
				return nil
			}
			<-req.Context().Done()
			return answerJSON(http.StatusOK, `{}`)
		}},
		{name: "no events list", want: poppycheck.Failed, answer: func(req *http.Request) *http.Response {
			if !waitRead(req) {
				return nil
			}
			cur := strconv.Quote(req.URL.Query().Get("cursor"))
			return answerJSON(http.StatusOK, `{"cursor":`+cur+`,"has_more":false,"status":"idle","responder":"agent"}`)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := c.opts
			srv := poppytest.NewServer(t, &opts)
			layer := &company{srv: srv, answer: c.answer}
			rep := runWith(t, srv, &poppycheck.Options{HTTPClient: layer.client()})
			// CO-7.5-03
			r, _ := rep.Result("CO-7.5-03")
			if r.Status != c.want {
				t.Errorf("CO-7.5-03: %s (%s%s), want %s", r.Status, r.Detail, r.Reason, c.want)
			}
			if c.want == poppycheck.Passed {
				noFailures(t, rep)
			}
		})
	}
}

// TestConformantCompanies: the fake with each of the switches that keep
// it conformant but change what the check meets (a choice, a MAY, a
// reading of the spec the fake doesn't take by default) fails no rule.
// Together with TestMisconfigurations, which wants exactly the rules each
// breaking switch breaks, this is "every failure reported is the
// Company's" for every Company this module can make.
func TestConformantCompanies(t *testing.T) {
	interactive := func(o poppytest.Options) poppytest.Options {
		o.SignIn.Disable = append(o.SignIn.Disable, "device") // a person here plays Direct and Mediated
		return o
	}
	for name, o := range map[string]poppytest.Options{
		"Tokens.RevokeOnReissue (interactive)":  interactive(poppytest.Options{Tokens: poppytest.TokenPolicy{RevokeOnReissue: true}}),
		"Tokens.RevokeOnReissue":                {Tokens: poppytest.TokenPolicy{RevokeOnReissue: true}},
		"Tokens.JWT, EmbedCredentials":          {Tokens: poppytest.TokenPolicy{JWT: true, EmbedCredentials: true}},
		"Tokens.TTL of 5 minutes":               {Tokens: poppytest.TokenPolicy{TTL: 5 * time.Minute}},
		"Conversations.Retention":               {Conversations: poppytest.ConversationOptions{Retention: 1}},
		"Conversations.PageSize":                {Conversations: poppytest.ConversationOptions{PageSize: 1}},
		"Conversations.MaxWait":                 {Conversations: poppytest.ConversationOptions{MaxWait: time.Millisecond}},
		"Conversations.CloseStreamAfter":        {Conversations: poppytest.ConversationOptions{Streaming: true, CloseStreamAfter: 1}},
		"Conversations.StreamIgnoresCursor":     {Conversations: poppytest.ConversationOptions{Streaming: true, StreamIgnoresCursor: true}},
		"Discovery.RedirectStatuses":            {Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"https://provider.test/example/poppy.json"}, RedirectStatuses: []int{302}}},
		"Discovery caching: no-store":           {Discovery: poppytest.DiscoveryOptions{PoppyCacheControl: "no-store", MetadataCacheControl: "no-store"}},
		"Discovery.DropWeb, DropAgent":          {Discovery: poppytest.DiscoveryOptions{DropWeb: true, DropAgent: true}},
		"Discovery.DropAPIs":                    {Discovery: poppytest.DiscoveryOptions{DropAPIs: true}},
		"SignIn.OmitInterval":                   {SignIn: poppytest.SignInPolicy{OmitInterval: true}},
		"SignIn.StrictResourceIndicators":       {SignIn: poppytest.SignInPolicy{StrictResourceIndicators: true}, API: poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/v1"}},
		"SignIn.UnusualOnNewKey (interactive)":  interactive(poppytest.Options{SignIn: poppytest.SignInPolicy{UnusualOnNewKey: true}}),
		"SignIn.NarrowScopesOnly (interactive)": interactive(poppytest.Options{SignIn: poppytest.SignInPolicy{NarrowScopesOnly: true}}),
		"MCP.OnAPIHost, SecondServer":           {MCP: poppytest.MCPServingOptions{OnAPIHost: true, SecondServer: true}},
		"Operations.RequireOperations":          {Operations: poppytest.OperationsOptions{RequireOperations: true}},
		"Clients.SessionStartsPerMinute":        {Clients: poppytest.ClientOptions{SessionStartsPerMinute: 1}},
		"Web.SameSite None, RevokeOnRejoin":     {Web: poppytest.WebOptions{SameSite: http.SameSiteNoneMode, RevokeOnRejoin: true}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := poppytest.NewServer(t, &o)
			var p poppycheck.Person
			if strings.HasSuffix(name, "(interactive)") {
				p = &person{srv: srv}
			}
			rep := runWith(t, srv, &poppycheck.Options{Person: p})
			noFailures(t, rep)
			if rep.Aborted != "" {
				t.Errorf("aborted: %s", rep.Aborted)
			}
		})
	}
}

// TestNonceFreshness: RFC 9449 (section 4.3) lets a Company that requires
// DPoP nonces judge a proof's freshness by its nonce rather than its iat,
// as oidc-provider does: with nonces required, a Company that takes a
// proof ten minutes old whose nonce is fresh fails neither CO-4.3-05 nor
// CO-4.3-08 (the check can't see the iat check there); without nonces, the
// same Company fails both.
func TestNonceFreshness(t *testing.T) {
	for _, nonces := range []bool{true, false} {
		srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: nonces}})
		layer := &company{srv: srv, answer: func(req *http.Request) *http.Response {
			cl := claims(req.Header.Get("DPoP"))
			iat, _ := cl["iat"].(float64)
			if iat == 0 || srv.Clock().Now().Unix()-int64(iat) < 5*60 {
				return nil
			}
			if req.URL.Path == "/oauth/token" {
				return answerJSON(http.StatusOK, `{"access_token":"pst_acceptedStaleProof0123456789","token_type":"DPoP","expires_in":600,"scope":"","session_id":"`+form(req).Get("session_id")+`","signed_in":false}`,
					"Cache-Control", "no-store")
			}
			return answerJSON(http.StatusOK, `{"products":[]}`)
		}}
		rep := runWith(t, srv, &poppycheck.Options{HTTPClient: layer.client()})
		got := failedSet(rep)
		for _, rule := range []string{"CO-4.3-05", "CO-4.3-08"} {
			r, _ := rep.Result(rule)
			// CO-4.3-05, CO-4.3-08
			switch {
			case nonces && r.Status != poppycheck.NotObserved:
				t.Errorf("nonces required: %s %s (%s), want not observed", rule, r.Status, r.Detail)
			case !nonces && r.Status != poppycheck.Failed:
				t.Errorf("no nonces: %s %s (%s), want failed", rule, r.Status, r.Reason)
			}
		}
		if nonces && len(got) > 0 || !nonces && !slices.Equal(got, []string{"CO-4.3-05", "CO-4.3-08"}) {
			t.Errorf("nonces %v: failed %v", nonces, got)
		}
	}
}

// TestNarrowerScopeAnswer: a Company may answer the probe for a scope a
// signed-out Session lacks by issuing less than asked, saying so in scope
// (RFC 6749 section 5.1): a token of scope "" escalates nothing, and
// passes CO-4.3-16; one that grants the scope asked fails it
// (TestProbeTokensStayApart).
func TestNarrowerScopeAnswer(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	c := &company{srv: srv, answer: func(req *http.Request) *http.Response {
		if req.Method == http.MethodPost && req.URL.Path == "/oauth/token" {
			if f := form(req); f.Get("scope") == "poppy:read" && f.Get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer" {
				return answerJSON(http.StatusOK, `{"access_token":"pst_narrowerThanAsked0123456789","token_type":"DPoP","expires_in":3600,"scope":"","session_id":"`+f.Get("session_id")+`","signed_in":false}`,
					"Cache-Control", "no-store")
			}
		}
		return nil
	}}
	rep := runWith(t, srv, &poppycheck.Options{HTTPClient: c.client()})
	noFailures(t, rep)
	// CO-4.3-16
	if r, _ := rep.Result("CO-4.3-16"); r.Status != poppycheck.Passed {
		t.Errorf("CO-4.3-16: %s (%s)", r.Status, r.Reason)
	}
}
