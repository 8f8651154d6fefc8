package main

// poppy fake judges the agent, not the person: a real browser approving a
// Device Sign-In, the page's /user/sign-in control, and an agent run with
// --run; /violations lists what the agent broke, oldest first.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/browser/headless"
	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
)

// deviceSignIn starts a Device Sign-In by an SDK agent against the fake.
func deviceSignIn(t *testing.T, ctx context.Context, run *fakeRun) (*poppy.Session, *poppy.DeviceAuthorization) {
	t.Helper()
	agent, _ := agenttest.New(t, run.Srv, nil) // the Identity, served on agent.test, is not needed here
	company, err := agent.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := company.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	da, err := sess.AuthorizeDevice(ctx, &poppy.SignInOptions{Scopes: []string{"poppy:read"}})
	if err != nil {
		t.Fatal(err)
	}
	return sess, da
}

// A person approving a Device Sign-In in a real (headless) Chromium is the
// User: the fake records no violation, and the agent is signed in.
func TestPA_4_4_02_RealBrowserApprovalIsTheUsers(t *testing.T) {
	if _, err := headless.LookPath(); err != nil {
		realtest.Missing(t, "headless Chromium", "no chromium on PATH (install the Debian package chromium, as .ci/run does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run, stop := startFake(t, &fakeOptions{app: testApp(&bytes.Buffer{}, &bytes.Buffer{}), Set: map[string]string{"SignIn.DeviceInterval": "1s"}})
	sess, da := deviceSignIn(t, ctx, run)
	trust := run.Srv.BrowserTrust()
	chromium, err := headless.Start(ctx, &headless.Options{HostResolverRules: trust.ChromiumHostRules(), TrustSPKI: []string{trust.SPKI}})
	if err != nil {
		t.Fatal(err)
	}
	defer chromium.Close()
	if _, err := chromium.Navigate(ctx, &browser.NavigateRequest{URL: da.VerificationURIComplete}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromium.Click(ctx, `button[value="approve"]`, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := sess.PollDevice(ctx, da); err != nil || res == nil {
		t.Fatalf("PollDevice after the approval in Chromium: %v", err)
	}
	// PA-4.4-02: the person's browser is not the agent.
	if vs := run.Srv.Violations(); len(vs) != 0 {
		t.Fatalf("the person's approval in Chromium recorded %v", vs)
	}
	users := 0
	for _, r := range run.Srv.RequestsTo("verification") {
		if r.User && !r.Browser {
			users++
		}
	}
	if users < 2 {
		t.Errorf("%d requests of Chromium to the device page marked as the User's, want the page and its form", users)
	}
	if err := stop(); err != nil {
		t.Errorf("an honest run ended with %v", err)
	}
}

// The page's /user/sign-in approves a Device Sign-In without a browser,
// takes JSON only, and /violations lists the agent's violations oldest
// first, with since.
func TestFakeUserControlAndViolations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, stop := startFake(t, &fakeOptions{app: testApp(&bytes.Buffer{}, &bytes.Buffer{}), Set: map[string]string{"SignIn.DeviceInterval": "1s"}})
	sess, da := deviceSignIn(t, ctx, run)
	post := func(ct, body string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, run.Page+"user/sign-in", strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("application/x-www-form-urlencoded", "user_code="+da.UserCode+"&decision=approve"); code != http.StatusUnsupportedMediaType {
		t.Errorf("a form post to /user/sign-in: %d, want 415", code)
	}
	if code := post("application/json", `{"user_code":"`+da.UserCode+`","decision":"approve"}`); code != http.StatusOK {
		t.Fatalf("/user/sign-in: %d", code)
	}
	if _, err := sess.PollDevice(ctx, da); err != nil {
		t.Fatalf("PollDevice after /user/sign-in: %v", err)
	}
	if vs := run.Srv.Violations(); len(vs) != 0 {
		t.Fatalf("the User's control recorded %v", vs)
	}
	// Two violations by a raw agent: API requests without a token.
	for range 2 {
		resp, err := run.Srv.Client().Get("https://api.example.test/products")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	read := func(since string) (out struct {
		Violations []fakeViolation
		Next       int
	}) {
		t.Helper()
		resp, err := http.Get(run.Page + "violations?since=" + since)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := read("0")
	if len(all.Violations) != 2 || all.Violations[0].Seq != 1 || all.Violations[1].Seq != 2 || all.Next != 2 || all.Violations[0].Rule != "PA-4.3-23" {
		t.Fatalf("/violations?since=0 = %+v", all)
	}
	if later := read("1"); len(later.Violations) != 1 || later.Violations[0].Seq != 2 {
		t.Errorf("/violations?since=1 = %+v", later)
	}
	if err := stop(); err == nil {
		t.Error("a fake that saw violations ended without an error")
	}
}

// --run runs the agent's command with the fake's environment, stops when
// it ends, and exits non-zero when it failed or broke a rule; --junit
// reports both.
func TestFakeRunAgent(t *testing.T) {
	dir := t.TempDir()
	run := func(script string) (string, string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		junit := filepath.Join(dir, "report.xml")
		opts := &fakeOptions{app: testApp(&stdout, &stderr), Set: map[string]string{}, PageAddr: "127.0.0.1:0",
			runMode: true, Run: []string{"sh", "-c", script}, RunTimeout: time.Minute, JUnit: junit}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := runFake(ctx, opts)
		b, _ := os.ReadFile(junit)
		return stderr.String(), string(b), err
	}
	// An honest agent that sees the environment: exit 0.
	if stderr, junit, err := run(`test -n "$HTTPS_PROXY" && test -s "$SSL_CERT_FILE" && test -n "$POPPY_FAKE_PAGE"`); err != nil || !strings.Contains(junit, `failures="0"`) {
		t.Errorf("an honest agent: %v\n%s\n%s", err, stderr, junit)
	}
	// A failing agent.
	if _, junit, err := run(`exit 3`); err == nil || !strings.Contains(err.Error(), "status 3") || !strings.Contains(junit, "<failure") {
		t.Errorf("a failing agent: %v\n%s", err, junit)
	}
	// An agent that breaks a rule: the rule in the exit text and the report.
	if _, err := exec.LookPath("curl"); err != nil {
		realtest.Missing(t, "curl", "no curl (install the Debian package curl)")
	}
	stderr, junit, err := run(`curl -s -o /dev/null https://api.example.test/products`)
	if err == nil || !strings.Contains(stderr, "violation PA-4.3-23") || !strings.Contains(junit, `<testcase name="PA-4.3-23"`) {
		t.Errorf("an agent without a token: %v\n%s\n%s", err, stderr, junit)
	}
}
