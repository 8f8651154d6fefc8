package poppytest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
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
	if _, err := poppytest.New(&poppytest.Options{Misconfig: poppytest.Misconfig{}, RedirectWellKnown: []string{"http://provider.test/x"}}); err == nil {
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
