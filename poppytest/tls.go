package poppytest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// tlsMaterial is the fake's CA and the leaf certificates it serves.
type tlsMaterial struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	pool   *x509.CertPool
	leaf   *tls.Certificate // covers every host known at start

	mu    sync.Mutex
	extra map[string]*tls.Certificate // minted later for hosts added by HandleAgent
}

func newTLSMaterial(hosts []string) (*tlsMaterial, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "poppytest CA", Organization: []string{"poppytest"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	m := &tlsMaterial{
		caCert: caCert,
		caKey:  caKey,
		caPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pool:   x509.NewCertPool(),
		extra:  map[string]*tls.Certificate{},
	}
	m.pool.AddCert(caCert)
	if m.leaf, err = m.mint(hosts); err != nil {
		return nil, err
	}
	return m, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// mint issues an ECDSA P-256 leaf certificate for hosts, signed by the CA.
func (m *tlsMaterial) mint(hosts []string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		DNSNames:     hosts,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.caCert, &key.PublicKey, m.caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func (m *tlsMaterial) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(hello.ServerName)
	if name == "" || m.leaf.Leaf.VerifyHostname(name) == nil {
		return m.leaf, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.extra[name]; ok {
		return c, nil
	}
	c, err := m.mint([]string{name})
	if err != nil {
		return nil, err
	}
	m.extra[name] = c
	return c, nil
}

// newTransport returns a transport that trusts pool and dials known hosts
// on port 443 to tlsAddr and on port 80 to plainAddr.
func newTransport(pool *x509.CertPool, tlsAddr, plainAddr string, known func(string) bool) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			host = canonicalHost(host)
			if !known(host) {
				return nil, fmt.Errorf("poppytest: dial %s: host not served by the fake", addr)
			}
			switch port {
			case "443":
				return d.DialContext(ctx, "tcp", tlsAddr)
			case "80":
				return d.DialContext(ctx, "tcp", plainAddr)
			}
			return nil, fmt.Errorf("poppytest: dial %s: the fake serves only ports 443 and 80", addr)
		},
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
}

// The environment variables of Env and ClientFromEnv.
const (
	envAddr      = "POPPYTEST_ADDR"
	envPlainAddr = "POPPYTEST_PLAIN_ADDR"
	envCA        = "POPPYTEST_CA"
	envHosts     = "POPPYTEST_HOSTS"
	envOffset    = "POPPYTEST_CLOCK_OFFSET"
)

// Env returns environment variables ("NAME=value") with which a child OS
// process reaches this fake, in either of two ways:
//
//   - Through ClientFromEnv, in a child that imports poppytest:
//     POPPYTEST_ADDR and POPPYTEST_PLAIN_ADDR (the TLS and plain
//     listeners), POPPYTEST_CA (the CA certificate, DER in standard
//     base64),
//     POPPYTEST_HOSTS (the hosts served, comma-separated) and
//     POPPYTEST_CLOCK_OFFSET (the Clock's offset at the time of the call,
//     for ClockFromEnv).
//   - As its HTTPS proxy, in an unmodified binary using Go's standard
//     transport (the SDK's default client included): HTTPS_PROXY (and
//     https_proxy) name the fake's CONNECT proxy on a loopback port,
//     SSL_CERT_FILE a file holding the fake's CA certificate, which Go
//     then trusts instead of the system's roots, and NO_PROXY (and
//     no_proxy) are emptied so that no Company host bypasses the proxy.
//     Such a child uses the real clock: leave the fake's Clock where it is.
//     The SDK's default client connects to the proxy the environment names
//     wherever it is, loopback included, since the operator and not a
//     Company chose it.
//
// An unmodified binary needs only HTTPS_PROXY, SSL_CERT_FILE and NO_PROXY
// (and the lower-case https_proxy and no_proxy, which some programs read
// instead); the POPPYTEST_* variables are for ClientFromEnv.
//
// Append the result to os.Environ() for exec.Cmd.Env: later entries win.
// Every value is one line, so that the list, written to a file one entry
// per line, is exported from a POSIX shell as it is:
//
//	while IFS= read -r kv; do export "$kv"; done < fake.env
//
// Env fails the test of NewServer (a Server from New panics) if the proxy
// can't start; a program that wants the error calls ProxyURL first.
func (s *Server) Env() []string {
	s.hostsMu.RLock()
	hosts := make([]string, 0, len(s.hosts))
	for h := range s.hosts {
		hosts = append(hosts, h)
	}
	s.hostsMu.RUnlock()
	slices.Sort(hosts)
	env := []string{
		envAddr + "=" + s.ln.Addr().String(),
		envPlainAddr + "=" + s.plainLn.Addr().String(),
		envCA + "=" + base64.StdEncoding.EncodeToString(s.tls.caDER()),
		envHosts + "=" + strings.Join(hosts, ","),
		envOffset + "=" + s.clock.Offset().String(),
	}
	p, err := s.startProxy()
	if err != nil {
		s.misuse(true, "poppytest: starting the proxy: %v", err)
		return env
	}
	if p == nil {
		return env // closed
	}
	proxyURL := "http://" + p.ln.Addr().String()
	return append(env,
		"HTTPS_PROXY="+proxyURL, "https_proxy="+proxyURL,
		"NO_PROXY=", "no_proxy=",
		"SSL_CERT_FILE="+p.caFile,
	)
}

// ClientFromEnv builds, in a process started with Server.Env, an HTTP client
// equivalent to Server.Client. It returns ErrNoFake when the environment
// names no fake.
func ClientFromEnv() (*http.Client, error) {
	addr, plain, ca, hosts := os.Getenv(envAddr), os.Getenv(envPlainAddr), os.Getenv(envCA), os.Getenv(envHosts)
	if addr == "" || ca == "" || hosts == "" {
		return nil, ErrNoFake
	}
	pool, err := caPool(ca)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, h := range strings.Split(hosts, ",") {
		set[h] = true
	}
	return &http.Client{Transport: newTransport(pool, addr, plain, func(h string) bool { return set[h] })}, nil
}

// caPool reads POPPYTEST_CA: DER in standard base64, as Env writes it, or
// PEM, as earlier versions did.
func caPool(ca string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if strings.HasPrefix(strings.TrimSpace(ca), "-----BEGIN") {
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return nil, errors.New("poppytest: bad CA certificate in " + envCA)
		}
		return pool, nil
	}
	der, err := base64.StdEncoding.DecodeString(ca)
	if err != nil {
		return nil, errors.New("poppytest: bad CA certificate in " + envCA)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errors.New("poppytest: bad CA certificate in " + envCA)
	}
	pool.AddCert(cert)
	return pool, nil
}

// caDER is the CA certificate, DER.
func (m *tlsMaterial) caDER() []byte { return m.caCert.Raw }

// ClockFromEnv returns a Clock with the offset the parent's Clock had when
// Env was called. Later Advance calls in either process are not shared.
func ClockFromEnv() *OffsetClock {
	c := &OffsetClock{}
	if d, err := time.ParseDuration(os.Getenv(envOffset)); err == nil {
		c.Advance(d)
	}
	return c
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
