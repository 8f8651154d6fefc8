package poppytest_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// TestNew: program mode returns configuration errors instead of failing
// a test, serves like NewServer, and its proxy with the CA of
// BrowserTrust reaches the Company from a plain client; after Close the
// proxy is gone.
func TestNew(t *testing.T) {
	if _, err := poppytest.New(&poppytest.Options{Issuer: "http://auth.example.test"}); err == nil || !strings.Contains(err.Error(), "CO-3-07") {
		t.Errorf("New with an http issuer: %v", err)
	}
	if _, err := poppytest.New(&poppytest.Options{Misconfig: poppytest.Misconfig{}, Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"http://provider.test/x"}}}); err == nil {
		t.Error("New accepted an http redirect without Misconfig.InsecureRedirect")
	}
	srv, err := poppytest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := srv.ProxyURL()
	if err != nil || !strings.HasPrefix(proxy, "http://127.0.0.1:") {
		t.Fatalf("ProxyURL %q, %v", proxy, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.BrowserTrust().CAPEM) {
		t.Fatal("no CA")
	}
	pu, _ := url.Parse(proxy)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://example.test/.well-known/poppy.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("poppy.json through the proxy: %d", resp.StatusCode)
	}
	for i := 0; i < 3; i++ {
		resp, err := c.Get("https://example.test/.well-known/poppy.json")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	all, last := srv.Requests(), srv.LastRequests(2)
	if len(last) != 2 || last[1].Index != all[len(all)-1].Index || last[0].Index != all[len(all)-2].Index {
		t.Errorf("LastRequests(2) = %d requests, the log ends with %d", len(last), all[len(all)-1].Index)
	}
	if n := len(srv.LastRequests(100)); n != len(all) {
		t.Errorf("LastRequests(100) = %d, the log holds %d", n, len(all))
	}
	c.CloseIdleConnections()
	srv.Close()
	if _, err := srv.ProxyURL(); err == nil {
		t.Error("ProxyURL after Close")
	}
	if len(srv.Violations()) != 0 {
		t.Errorf("violations: %v", srv.Violations())
	}
}

// TestProgramImportsNoTesting: a program that imports poppytest (or
// agenttest) doesn't link package testing or its flags; only the test
// helper's small TB interface names tests at all.
func TestProgramImportsNoTesting(t *testing.T) {
	for _, pkg := range []string{".", "./agenttest"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == "testing" || strings.HasPrefix(dep, "testing/") {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
}

// TestNewServerNeedsTest: the test helper refuses a nil t, saying what a
// program calls instead.
func TestNewServerNeedsTest(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "calls New") {
			t.Errorf("NewServer(nil, nil): recovered %v", r)
		}
	}()
	poppytest.NewServer(nil, nil)
}

// TestMisuseWithoutTest: a Server from New has no test to fail, so a
// misuse the API can't return (a conversation that doesn't exist) panics.
func TestMisuseWithoutTest(t *testing.T) {
	srv, err := poppytest.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `no conversation "nope"`) {
			t.Errorf("recovered %v", r)
		}
	}()
	srv.Conversations().Say("nope", poppytest.Reply{Text: "hi"})
}
