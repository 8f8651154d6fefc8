package poppytest_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

// Env's proxy: a standard transport configured only from HTTPS_PROXY and
// SSL_CERT_FILE reaches every host the fake serves over verified TLS, and
// nothing else.
func TestEnvProxy(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	env := envMap(srv.Env())
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "SSL_CERT_FILE", "NO_PROXY", "no_proxy", "POPPYTEST_ADDR", "POPPYTEST_CA", "POPPYTEST_HOSTS"} {
		if _, ok := env[k]; !ok {
			t.Fatalf("Env lacks %s", k)
		}
	}
	pu, err := url.Parse(env["HTTPS_PROXY"])
	if err != nil || pu.Scheme != "http" || !strings.HasPrefix(pu.Host, "127.0.0.1:") {
		t.Fatalf("HTTPS_PROXY %q", env["HTTPS_PROXY"])
	}
	caFile := env["SSL_CERT_FILE"]
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("SSL_CERT_FILE holds no certificate")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, u := range []string{srv.URL() + "/.well-known/poppy.json", "https://www.example.test/.well-known/poppy.json"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"protocol_version"`) {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
		}
	}
	if n := len(srv.RequestsTo(poppytest.EndpointPoppyJSON)); n != 2 {
		t.Fatalf("the fake logged %d poppy.json requests", n)
	}
	// Other hosts and ports are refused, as Client refuses to dial them.
	for _, u := range []string{"https://other.test/", "https://example.test:8443/"} {
		if _, err := c.Get(u); err == nil {
			t.Fatalf("GET %s through the proxy succeeded", u)
		}
	}
	// The proxy only tunnels.
	resp, err := http.Get("http://" + pu.Host + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("plain request to the proxy: %d", resp.StatusCode)
	}
	// Close ends the tunnels and removes the CA file.
	tr.CloseIdleConnections()
	srv.Close()
	if _, err := os.Stat(caFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("CA file after Close: %v", err)
	}
}

// A tunnel still open at Close is ended by it (leakcheck in TestMain checks
// that no goroutine is left).
func TestEnvProxyCloseWithOpenTunnel(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	env := envMap(srv.Env())
	pu, _ := url.Parse(env["HTTPS_PROXY"])
	pem, _ := os.ReadFile(env["SSL_CERT_FILE"])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL() + "/.well-known/poppy.json")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close() // the connection stays pooled, its tunnel open
	srv.Close()
	tr.CloseIdleConnections()
}
