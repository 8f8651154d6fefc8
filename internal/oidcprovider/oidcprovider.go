package oidcprovider

// Start runs node testdata/provider.mjs and everything around it that is
// the test's network rather than the Company: a test CA and the
// certificates of every host, a TLS server on loopback for the agents'
// own hosts (where the Company fetches client metadata and keys, spec
// 4.1), and HTTP clients that route each host name to the right server.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/realtest"
)

// The Company's names. Every host is served by the one node process;
// Company.Client routes them to it.
const (
	// Domain is the Company's domain: poppy.json is at
	// https://example.test/.well-known/poppy.json.
	Domain = "example.test"
	// Issuer is auth.issuer, oidc-provider's issuer.
	Issuer = "https://auth.example.test"
	// Resource1 and Resource2 are the resources of the Company's two
	// OpenAPI APIs (each API's description is at the resource's
	// /openapi.json).
	Resource1 = "https://api.example.test/v1"
	Resource2 = "https://api2.example.test/v1"
)

// Resources are the Company's resources, in poppy.json's order.
func Resources() []string { return []string{Resource1, Resource2} }

// Options configures Start.
type Options struct {
	// Agents serves the agents' own hosts, by host name (such as
	// "agent.test"): the Company fetches each agent's client metadata
	// document at its client_id and the JWKS it names from here (spec
	// 4.1), and a browser following a Direct Sign-In redirect lands
	// here. Each handler is served over TLS on loopback with a
	// certificate of the test's CA; the Company reaches no other host.
	Agents map[string]http.Handler
}

// Company is oidc-provider run as a Poppy Company.
type Company struct {
	// Client reaches every host of the Company and of Options.Agents,
	// on loopback over TLS, trusting the test's CA only. It follows no
	// redirect to an agent's host (CheckRedirect of http.Client's
	// default otherwise).
	Client *http.Client
	// RootCAs is the test's CA, which signed every certificate.
	RootCAs *x509.CertPool

	agents map[string]bool
}

// Start starts oidc-provider as a Poppy Company for tb, stopped when tb
// ends. It skips tb (fails it under POPPY_TEST_REAL=1, package realtest)
// when node or the npm package (npm ci in this package's testdata, as
// .ci/run does) is missing.
func Start(tb testing.TB, opts *Options) *Company {
	tb.Helper()
	if opts == nil {
		opts = &Options{}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		realtest.Missing(tb, "oidc-provider", "no node on PATH (install Node 20 and run npm ci in internal/oidcprovider/testdata, as .ci/run does)")
	}
	scripts, err := scriptDir()
	if err != nil {
		tb.Fatalf("oidcprovider: %v", err)
	}
	if _, err := os.Stat(filepath.Join(scripts, "node_modules", "oidc-provider", "package.json")); err != nil {
		realtest.Missing(tb, "oidc-provider", "the npm package is not installed (run npm ci in internal/oidcprovider/testdata, as .ci/run does)")
	}
	dir := tb.TempDir()
	agentHosts := make([]string, 0, len(opts.Agents))
	for h := range opts.Agents {
		agentHosts = append(agentHosts, h)
	}
	slices.Sort(agentHosts)
	hosts := append([]string{Domain, "auth." + Domain, "api." + Domain, "api2." + Domain}, agentHosts...)
	pool, cert := writeTLS(tb, dir, hosts...)

	// The agents' hosts, on a TLS server of the test's own.
	agentAddr := ""
	if len(agentHosts) > 0 {
		agentAddr = serveAgents(tb, opts.Agents, cert)
	}

	cfg, _ := json.Marshal(map[string]any{
		"issuer": Issuer, "domain": Domain, "resources": Resources(),
		"tls_cert": filepath.Join(dir, "cert.pem"), "tls_key": filepath.Join(dir, "key.pem"),
		"agents": map[string]any{"hosts": agentHosts, "addr": agentAddr, "ca": filepath.Join(dir, "ca.pem")},
	})
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(node, "provider.mjs", cfgPath)
	cmd.Dir = scripts
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stderr := &lockedBuilder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if tb.Failed() && stderr.Len() > 0 {
			tb.Logf("oidc-provider's stderr:\n%s", stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var ready struct{ Port int }
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case l := <-line:
		if err := json.Unmarshal([]byte(l), &ready); err != nil || ready.Port == 0 {
			tb.Fatalf("oidc-provider did not start: %q\n%s", l, stderr.String())
		}
	case <-t.C:
		tb.Fatalf("oidc-provider did not start in 30 s\n%s", stderr.String())
	}
	companyAddr := fmt.Sprintf("127.0.0.1:%d", ready.Port)
	agents := map[string]bool{}
	for _, h := range agentHosts {
		agents[h] = true
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(a)
			switch {
			case host == Domain || strings.HasSuffix(host, "."+Domain):
				return (&net.Dialer{}).DialContext(ctx, "tcp", companyAddr)
			case agents[host]:
				return (&net.Dialer{}).DialContext(ctx, "tcp", agentAddr)
			}
			return nil, fmt.Errorf("no route to %s in this test", a)
		},
		ForceAttemptHTTP2: true,
	}
	tb.Cleanup(tr.CloseIdleConnections)
	c := &Company{RootCAs: pool, agents: agents}
	c.Client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return c
}

// scriptDir is the directory of provider.mjs and its node_modules: this
// package's testdata, found beside this source file (the tests that start
// the Company run in other packages' directories).
func scriptDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("can't find this package's source directory")
	}
	dir := filepath.Join(filepath.Dir(file), "testdata")
	if _, err := os.Stat(filepath.Join(dir, "provider.mjs")); err != nil {
		return "", fmt.Errorf("provider.mjs is not beside the package's source (built with -trimpath?): %w", err)
	}
	return dir, nil
}

// serveAgents serves each handler at its host over TLS on a loopback port
// of its own, until tb ends, and returns the address.
func serveAgents(tb testing.TB, handlers map[string]http.Handler, cert tls.Certificate) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			h := handlers[host]
			if h == nil {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeTLS(ln, "", "")
	}()
	tb.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// writeTLS writes a test CA (dir/ca.pem) and its leaf certificate for
// hosts (dir/cert.pem, dir/key.pem), and returns a pool that trusts the
// CA and the leaf.
func writeTLS(tb testing.TB, dir string, hosts ...string) (*x509.CertPool, tls.Certificate) {
	tb.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "poppy oidc-provider test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	for name, b := range map[string][]byte{
		"ca.pem":   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"cert.pem": certPEM,
		"key.pem":  keyPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, cert
}

// Browser returns the User's browser: it keeps oidc-provider's cookies
// and follows its redirects, stopping at a redirect to an agent's host
// (Options.Agents), which it returns as it is.
func (c *Company) Browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Transport: c.Client.Transport, Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if c.agents[req.URL.Hostname()] || len(via) > 10 {
				return http.ErrUseLastResponse
			}
			return nil
		}}
}

// DirectSignIn opens a Direct Sign-In authorization URL as the User
// (provider.mjs logs in and consents) and returns where oidc-provider
// sends the browser at the end: the agent's redirect URI with code, state
// and iss, or with an error.
func (c *Company) DirectSignIn(ctx context.Context, authz string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authz, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Browser().Do(req)
	if err != nil {
		return "", err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if u, err := url.Parse(loc); err != nil || !c.agents[u.Hostname()] {
		return "", fmt.Errorf("authorization ended at %d %s, not at an agent's redirect URI: %s", resp.StatusCode, resp.Request.URL, body)
	}
	return loc, nil
}

var (
	formRE   = regexp.MustCompile(`<form[^>]*action="([^"]+)"`)
	hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`)
)

// ApproveDevice opens a Device Sign-In's verification_uri_complete as the
// User and submits oidc-provider's pages as a browser would (the code's
// form, then the confirmation; provider.mjs logs in and consents in
// between) until one has no form left: the success page.
func (c *Company) ApproveDevice(ctx context.Context, verificationURIComplete string) error {
	b := c.Browser()
	get := func(method, u string, form url.Values) (*http.Response, error) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, u, body)
		if err != nil {
			return nil, err
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return b.Do(req)
	}
	resp, err := get(http.MethodGet, verificationURIComplete, nil)
	for step := 0; ; step++ {
		if err != nil {
			return err
		}
		page, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
		resp.Body.Close()
		m := formRE.FindSubmatch(page)
		if m == nil {
			if resp.StatusCode != 200 {
				return fmt.Errorf("device approval ended at %d: %s", resp.StatusCode, page)
			}
			return nil
		}
		if step == 5 {
			return fmt.Errorf("device approval: still a form after %d pages: %s", step, page)
		}
		form := url.Values{}
		for _, h := range hiddenRE.FindAllSubmatch(page, -1) {
			form.Set(string(h[1]), string(h[2]))
		}
		action, perr := resp.Request.URL.Parse(string(m[1]))
		if perr != nil {
			return perr
		}
		resp, err = get(http.MethodPost, action.String(), form)
	}
}

// lockedBuilder is the node process's stderr, written by exec's copying
// goroutine while the test may read it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
