package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
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
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInOptions{Disable: []string{"direct", "device"}}})
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
		srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInOptions{MediatedFailuresPerMinute: -1}})
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
