package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"encoding/xml"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// TestNewCmdCheck: the command fills its options from the command line
// (gh's shape: the test gets them through runF, nothing runs).
func TestNewCmdCheck(t *testing.T) {
	var got *checkOptions
	cmd := newCmdCheck(testApp(&bytes.Buffer{}, &bytes.Buffer{}), func(_ context.Context, o *checkOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"example.com", "--interactive", "--agent-url", "https://check.example.net/", "--listen", "127.0.0.1:9", "--max-requests", "50", "--timeout", "5s", "--failed-sign-ins"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Domain != "example.com" || !got.Interactive || got.AgentURL != "https://check.example.net/" || got.Listen != "127.0.0.1:9" || got.MaxRequests != 50 || got.Timeout != 5*time.Second || !got.FailedSignIns {
		t.Fatalf("options %+v", got)
	}
	if !strings.Contains(cmd.Example, "poppy check") {
		t.Error("poppy check --help has no examples")
	}
}

// TestNewCmdFake: every field of poppytest.Options of a simple type is a
// flag named after its path, and the flags reach the options.
func TestNewCmdFake(t *testing.T) {
	var got *fakeOptions
	cmd := newCmdFake(testApp(&bytes.Buffer{}, &bytes.Buffer{}), func(_ context.Context, o *fakeOptions) error { got = o; return nil })
	n := 0
	eachOption(func(path string, f reflect.StructField) {
		if _, ok := flagUsage(f.Type); !ok {
			return
		}
		n++
		if cmd.Flags().Lookup(optionFlagName(path)) == nil {
			t.Errorf("no flag for %s", path)
		}
	})
	if n < 60 {
		t.Errorf("only %d option flags", n)
	}
	for path, want := range map[string]string{"Misconfig.DropOrganization": "misconfig.drop-organization", "Discovery.DropAPIs": "discovery.drop-apis",
		"Tokens.TTL": "tokens.ttl", "API.Resource": "api.resource", "Tokens.JWT": "tokens.jwt", "MCP.AuthorizationServers": "mcp.authorization-servers",
		"Web.SameSite": "web.same-site", "Conversations.CloseStreamAfter": "conversations.close-stream-after",
		"SignIn.RotateAccountTokens": "sign-in.rotate-account-tokens", "Clients.MaxNew": "clients.max-new",
		// not fields, but the shapes a field name may take
		"APIResource": "api-resource", "JWTTokens": "jwt-tokens"} {
		if got := optionFlagName(path); got != want {
			t.Errorf("%s: flag %q, want %q", path, got, want)
		}
	}
	cmd.SetArgs([]string{"--misconfig.drop-organization", "--tokens.ttl", "10m", "--web.same-site", "strict", "--sign-in.disable", "device,mediated",
		"--operations.perform", "slow", "--agent", "agent.test=http://127.0.0.1:8080", "--ca-file", "ca.pem"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	o, err := got.serverOptions()
	if err != nil {
		t.Fatal(err)
	}
	if !o.Misconfig.DropOrganization || o.Tokens.TTL != 10*time.Minute || o.Web.SameSite != 3 || !reflect.DeepEqual(o.SignIn.Disable, []string{"device", "mediated"}) ||
		o.Operations.Perform != poppytest.PerformSlow || got.CAFile != "ca.pem" || len(got.Agents) != 1 {
		t.Errorf("options %+v, fake options %+v", o, got)
	}
	if !strings.Contains(cmd.Example, "poppy fake") {
		t.Error("poppy fake --help has no examples")
	}
}

// TestFakeConfigFile: the JSON form takes the Go field names, durations
// as strings, nested groups; flags win over it; an unknown member is a
// usage error.
func TestFakeConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fake.json")
	if err := os.WriteFile(cfg, []byte(`{"Tokens": {"TTL": "90s", "RequireNonce": true}, "Misconfig": {"OrganizationDomain": "other.test"},
		"SignIn": {"Accounts": [{"ID": "acct_9", "Credentials": {"email": "a@example.test", "password": "pw-9"}}]},
		"Web": {"SameSite": "none"}, "Conversations": {"Streaming": true, "MaxWait": "5s"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := (&fakeOptions{ConfigFile: cfg, Set: map[string]string{"Tokens.RequireNonce": "false"}}).serverOptions()
	if err != nil {
		t.Fatal(err)
	}
	if o.Tokens.TTL != 90*time.Second || o.Tokens.RequireNonce || o.Misconfig.OrganizationDomain != "other.test" || len(o.SignIn.Accounts) != 1 ||
		o.SignIn.Accounts[0].Credentials["password"] != "pw-9" || o.Web.SameSite != 4 || !o.Conversations.Streaming || o.Conversations.MaxWait != 5*time.Second {
		t.Errorf("options %+v", o)
	}
	for _, bad := range []string{`{"TokenTTL": "1s"}`, `{"Tokens": {"TTL": 90}}`, `{"Web": {"Nope": 1}}`, `not json`} {
		if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := (&fakeOptions{ConfigFile: cfg}).serverOptions(); err == nil {
			t.Errorf("%s: accepted", bad)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%s: %v is not a usage error", bad, err)
		}
	}
}

// TestRunFakeJSON: with --json the fake prints one ready object with the
// environment, the page and the CA file, and a violation object per
// violation at the end.
func TestRunFakeJSON(t *testing.T) {
	var out bytes.Buffer
	a := testApp(&out, &bytes.Buffer{})
	a.out.json = true
	run, stop := startFake(t, &fakeOptions{app: a, CAFile: filepath.Join(t.TempDir(), "ca.pem")})
	resp, err := run.Srv.Client().Get("https://api.example.test/products") // PA-4.3-23
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := stop(); err == nil {
		t.Error("a fake that saw a violation ended without an error")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var ready struct {
		Event, Page string
		CAFile      string `json:"ca_file"`
		Env         map[string]string
	}
	if err := json.Unmarshal([]byte(lines[0]), &ready); err != nil || ready.Env["CURL_CA_BUNDLE"] == "" {
		t.Fatalf("first line %s: %v", lines[0], err)
	}
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-1], `"rule":"PA-4.3-23"`) {
		t.Errorf("no violation line: %s", out.String())
	}
}

// TestRunCheckInteractive: poppy check --interactive against a fake that
// offers Mediated Sign-In only: the person types the credentials at the
// prompt (stdin), the check signs in, uses the Account Token and signs
// out; nothing fails and the secret credential is never printed.
func TestRunCheckInteractive(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"direct", "device"}}})
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr}))
	var stdout, stderr bytes.Buffer
	opts := &checkOptions{app: testApp(&stdout, &stderr), Domain: "example.test", Interactive: true, AgentURL: "https://agent.test/check/",
		Listen: addr, MaxRequests: 400, Timeout: 20 * time.Second, In: strings.NewReader("user@example.test\ncorrect horse\n"), httpClient: srv.Client()}
	if err := runCheck(context.Background(), opts); err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{`Mediated Sign-In: Email: `, `Mediated Sign-In: Password: `, `\nCO-4\.7-01 +passed`, `\nCO-4\.8-01 +passed`, `\nCO-4\.9-01 +passed`, ` 0 failed`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if strings.Contains(out+stderr.String(), "correct horse") {
		t.Error("the password was printed")
	}
	if v := srv.TakeViolations(); len(v) > 0 {
		t.Errorf("the check broke rules: %v", v)
	}
}

// TestRunCheckFails: a Company that breaks a rule makes poppy check exit 1
// and name it.
func TestRunCheckFails(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Misconfig: poppytest.Misconfig{PoppyDomains: []string{"other.test"}}})
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr}))
	var stdout bytes.Buffer
	a := testApp(&stdout, &bytes.Buffer{})
	err = runCheck(context.Background(), &checkOptions{app: a, Domain: "example.test", AgentURL: "https://agent.test/check/", Listen: addr,
		MaxRequests: 400, Timeout: 20 * time.Second, httpClient: srv.Client()})
	if code := a.exit(context.Background(), nil, err); code != exitError {
		t.Fatalf("exit %d for %v", code, err)
	}
	// CO-3.2-03
	if out := stdout.String(); !strings.Contains(out, "FAILED CO-3.2-03") || !strings.Contains(out, "Stopped early") {
		t.Errorf("output:\n%s", out)
	}
}

// TestRunCheckFailedSignIns: --failed-sign-ins against a fake that never
// rate-limits Mediated Sign-In reports CO-4.7-06 failed and exits 1;
// without the flag the rule is not observed and the run passes.
func TestRunCheckFailedSignIns(t *testing.T) {
	for _, flag := range []bool{true, false} {
		srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{MediatedFailuresPerMinute: -1}})
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		srv.HandleAgent("agent.test", httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr}))
		var stdout bytes.Buffer
		a := testApp(&stdout, &bytes.Buffer{})
		err = runCheck(context.Background(), &checkOptions{app: a, Domain: "example.test", AgentURL: "https://agent.test/check/", Listen: addr,
			MaxRequests: 400, Timeout: 20 * time.Second, FailedSignIns: flag, httpClient: srv.Client()})
		out := stdout.String()
		// CO-4.7-06
		if flag {
			if code := a.exit(context.Background(), nil, err); code != exitError || !strings.Contains(out, "FAILED CO-4.7-06") || !strings.Contains(out, " 1 failed") {
				t.Errorf("--failed-sign-ins: exit %d (%v), output:\n%s", code, err, out)
			}
		} else if err != nil || !regexp.MustCompile(`\nCO-4\.7-06 +not observed`).MatchString(out) {
			t.Errorf("without --failed-sign-ins: %v, output:\n%s", err, out)
		}
		if n := len(srv.RequestsTo(poppytest.EndpointSignIn)); flag && n != 6 || !flag && n != 0 {
			t.Errorf("--failed-sign-ins=%v: %d Mediated Sign-In requests", flag, n)
		}
	}
}

// TestNewCmdCheckFlags: the flags of reach and of CI fill the options,
// and DOMAIN may be left out.
func TestNewCmdCheckFlags(t *testing.T) {
	var got *checkOptions
	cmd := newCmdCheck(testApp(&bytes.Buffer{}, &bytes.Buffer{}), func(_ context.Context, o *checkOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--ca-file", "ca.pem", "--allow-network", "10.0.0.0/8", "--allow-network", "192.168.1.7", "--junit", "out.xml",
		"--baseline", "known.txt", "--only", "4.3,CO-7.5-03", "--only", "OPS6", "--max-time", "2m"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Domain != "" || got.CAFile != "ca.pem" || !slices.Equal(got.AllowNetworks, []string{"10.0.0.0/8", "192.168.1.7"}) || got.JUnit != "out.xml" ||
		got.Baseline != "known.txt" || !slices.Equal(got.Only, []string{"4.3", "CO-7.5-03", "OPS6"}) || got.MaxTime != 2*time.Minute || got.listenSet {
		t.Fatalf("options %+v", got)
	}
}

// companyOnLoopback serves the fake Company's answers from an https
// listener of its own on 127.0.0.1 (a Company under development, at
// https://127.0.0.1:PORT), with a certificate of its own CA, written to a
// PEM file. It counts the requests it gets.
func companyOnLoopback(t *testing.T, srv *poppytest.Server) (addr, caFile string, hits *atomic.Int64) {
	t.Helper()
	hits = &atomic.Int64{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.Host = "https", "example.test", "example.test"
		},
		Transport: srv.Client().Transport,
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		rp.ServeHTTP(w, r)
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake of the test without --ca-file
	ts.StartTLS()
	t.Cleanup(ts.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(ts.URL, "https://"), caFile, hits
}

// TestRunCheckReachesLoopback: poppy check 127.0.0.1:PORT reaches a
// Company on this machine with --unsafe-allow-loopback-http and --ca-file.
// Without them the check's own refusal (its SSRF guard, its trust) is a
// usage error naming the flag, never a failure of the Company, and the
// check sends the Company nothing it refuses.
func TestRunCheckReachesLoopback(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	addr, caFile, hits := companyOnLoopback(t, srv)
	_, port, _ := net.SplitHostPort(addr)
	run := func(domain string, loopback bool, ca string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		a := testApp(&stdout, &stderr)
		a.allowLoopback = loopback
		err := runCheck(context.Background(), &checkOptions{app: a, Domain: domain, Listen: "127.0.0.1:0", MaxRequests: 400, Timeout: 20 * time.Second, CAFile: ca})
		return a.exit(context.Background(), nil, err), stdout.String(), stderr.String()
	}
	for _, domain := range []string{addr, "localhost:" + port} {
		code, out, errOut := run(domain, false, caFile)
		if code != exitUsage || !strings.Contains(errOut, "--unsafe-allow-loopback-http") || strings.Contains(out, "FAILED") {
			t.Errorf("%s without --unsafe-allow-loopback-http: exit %d\n%s%s", domain, code, out, errOut)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the refused Company got %d requests", n)
	}
	code, out, errOut := run(addr, true, "")
	if code != exitUsage || !strings.Contains(errOut, "--ca-file") || strings.Contains(out, "FAILED") {
		t.Errorf("without --ca-file: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(addr, true, caFile)
	// The fake's poppy.json speaks for example.test, not for 127.0.0.1:
	// reached, the Company fails CO-3-06, and that alone.
	if code != exitError || !strings.Contains(out, "FAILED CO-3-06") || !strings.Contains(out, " 1 failed") {
		t.Errorf("with both flags: exit %d\n%s%s", code, out, errOut)
	}
}

// TestRunCheckIdentityHint: a check whose identity the Company can't fetch
// (here, the fake, which takes only https client_ids, against the default
// loopback identity) says exactly which flags make it reachable.
func TestRunCheckIdentityHint(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	var stdout, stderr bytes.Buffer
	a := testApp(&stdout, &stderr)
	err := runCheck(context.Background(), &checkOptions{app: a, Domain: "example.test", Listen: "127.0.0.1:0", MaxRequests: 400, Timeout: 20 * time.Second, httpClient: srv.Client()})
	if code := a.exit(context.Background(), nil, err); code != exitError {
		t.Fatalf("exit %d for %v", code, err)
	}
	for _, want := range []string{"invalid_client", "--agent-url", "--agent agent.test=http://127.0.0.1:8480", "poppy check"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the error lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestRunCheckFakeEnvironment: with poppy fake's environment loaded and no
// flags at all, poppy check checks the fake, its identity served where the
// fake's --agent agent.test=http://… reaches it.
func TestRunCheckFakeEnvironment(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr}))
	var stdout, stderr bytes.Buffer
	a := testApp(&stdout, &stderr)
	a.env.getenv = func(k string) string { return map[string]string{"POPPY_FAKE_DOMAIN": "example.test"}[k] }
	err = runCheck(context.Background(), &checkOptions{app: a, Listen: "127.0.0.1:0", MaxRequests: 400, Timeout: 20 * time.Second, httpClient: srv.Client(), fakeListen: addr})
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "poppy check example.test (agent https://agent.test/run-") || !strings.Contains(out, " 0 failed") {
		t.Errorf("output:\n%s", out)
	}
}

// TestRunCheckOtherVersion: a Company whose poppy.json follows another
// major version gets one line naming it, no table.
func TestRunCheckOtherVersion(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "1.0"}})
	code, out, errOut := checkFake(t, srv, &checkOptions{})
	if code != exitError || out != "" || !strings.Contains(errOut, "protocol version 1.0") || strings.Count(errOut, "\n") > 2 {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

// checkFake runs poppy check against srv with the identity at
// https://agent.test/ and the options set in o; it returns the exit code,
// stdout and stderr.
func checkFake(t *testing.T, srv *poppytest.Server, o *checkOptions) (int, string, string) {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr}))
	var stdout, stderr bytes.Buffer
	a := testApp(&stdout, &stderr)
	o.app, o.Domain, o.AgentURL, o.Listen, o.MaxRequests, o.Timeout, o.httpClient = a, "example.test", "https://agent.test/check/", addr, 400, 20*time.Second, srv.Client()
	err = runCheck(context.Background(), o)
	return a.exit(context.Background(), nil, err), stdout.String(), stderr.String()
}

// TestRunCheckCI: --junit writes the report for a CI; --baseline turns a
// listed failure into an expected one and a listed rule that passes into
// a failure of the run (stale); --only keeps the rules named.
func TestRunCheckCI(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	dir := t.TempDir()
	junit, known, stale := filepath.Join(dir, "check.xml"), filepath.Join(dir, "known.txt"), filepath.Join(dir, "stale.txt")
	if err := os.WriteFile(known, []byte("# fixed in the next release\nCO-5-17\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("CO-5-17\nCO-5-16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// CO-5-17
	code, out, errOut := checkFake(t, srv, &checkOptions{JUnit: junit})
	if code != exitError || !strings.Contains(out, "FAILED CO-5-17") {
		t.Errorf("no baseline: exit %d\n%s%s", code, out, errOut)
	}
	x, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(x, &doc); err != nil || doc.Failures != 1 {
		t.Fatalf("junit: %v, %d failures\n%s", err, doc.Failures, x)
	}
	code, out, errOut = checkFake(t, srv, &checkOptions{Baseline: known})
	if code != exitOK || !strings.Contains(out, "1 expected failure(s) (CO-5-17)") {
		t.Errorf("the baseline lists CO-5-17: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = checkFake(t, srv, &checkOptions{Baseline: stale})
	if code != exitError || !strings.Contains(errOut, "CO-5-16") || !strings.Contains(errOut, "now keeps") {
		t.Errorf("a stale entry: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = checkFake(t, srv, &checkOptions{Only: []string{"CO-5-17", "CO-5-16"}})
	if lines := regexp.MustCompile(`(?m)^CO-`).FindAllString(out, -1); code != exitError || len(lines) != 2 {
		t.Errorf("--only: exit %d, %d rule lines\n%s", code, len(lines), out)
	}
	for _, o := range []*checkOptions{{Only: []string{"CO-5-" + "99"}}, {Baseline: filepath.Join(dir, "missing.txt")}} { // a rule the table lacks
		if code, _, errOut := checkFake(t, srv, o); code != exitUsage {
			t.Errorf("%+v: exit %d: %s", o, code, errOut)
		}
	}
}
