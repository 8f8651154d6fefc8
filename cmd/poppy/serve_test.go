package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The keystore file is private to the OS user.
func TestStateFileMode(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.mustRun("init", "--base-url", "https://agent.test/poppy/")
	fi, err := os.Stat(filepath.Join(e.dir, ".config", "poppy", "keystore.db"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("keystore mode %v, want 0600", fi.Mode().Perm())
	}
	other := filepath.Join(e.dir, "elsewhere", "ks.db")
	e.mustRun("--state", other, "init", "--base-url", "https://agent.test/poppy/")
	if fi, err := os.Stat(other); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("--state file: %v %v", fi, err)
	}
}

// serve-identity over HTTPS with its own certificate, and a key rotation
// made by another process is picked up while it runs, the previous key
// still published.
func TestServeIdentityTLSAndRotation(t *testing.T) {
	e := newCLIEnv(t, nil)
	out := e.mustRun("--json", "init", "--base-url", "https://agent.test/poppy/")
	var before struct {
		SigningKey string `json:"signing_key"`
	}
	if err := json.Unmarshal([]byte(out), &before); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, pool := selfSigned(t, e.dir)
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.command(nil, "serve-identity", "--addr", addr, "--tls-cert", certFile, "--tls-key", keyFile, "--reload-keys", "100ms")
	screen := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = screen, screen
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	screen.waitFor(t, regexp.MustCompile(`Stop with Ctrl-C`), 20*time.Second)

	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "agent.test"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	defer client.CloseIdleConnections()
	get := func(path string) string {
		resp, err := client.Get("https://agent.test" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	if md := get("/poppy/agent.json"); !strings.Contains(md, `"client_id":"https://agent.test/poppy/agent.json"`) {
		t.Fatalf("metadata: %s", md)
	}
	if jwks := get("/poppy/jwks.json"); !strings.Contains(jwks, before.SigningKey) {
		t.Fatalf("jwks: %s", jwks)
	}

	out = e.mustRun("--json", "init", "--rotate-keys")
	var after struct {
		SigningKey string   `json:"signing_key"`
		Published  []string `json:"published_keys"`
	}
	if err := json.Unmarshal([]byte(out), &after); err != nil {
		t.Fatal(err)
	}
	if after.SigningKey == before.SigningKey || len(after.Published) != 2 || after.Published[1] != before.SigningKey {
		t.Fatalf("rotation: %+v", after)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		jwks := get("/poppy/jwks.json")
		if strings.Contains(jwks, after.SigningKey) && strings.Contains(jwks, before.SigningKey) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve-identity did not pick up the rotation: %s", jwks)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent.test"}, DNSNames: []string{"agent.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// The keystore's directory is the OS user's alone, as ssh insists for
// ~/.ssh: an existing default directory that others
// can write is made 0700, with a warning; a --state directory that others
// can write is refused (unless sticky, as /tmp), and so is a parent that
// others can write.
func TestStateDirPrivate(t *testing.T) {
	e := newCLIEnv(t, nil)
	dir := filepath.Join(e.dir, ".config", "poppy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := e.run("init", "--base-url", "https://agent.test/poppy/")
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the keystore's directory after init: %v %v", fi.Mode(), err)
	}
	if !strings.Contains(errOut, "others could write the keystore's directory") || !strings.Contains(errOut, "0777") {
		t.Fatalf("no warning of the repair: %q", errOut)
	}

	shared := filepath.Join(e.dir, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = e.run("--state", filepath.Join(shared, "ks.db"), "init", "--base-url", "https://agent.test/poppy/")
	if code != exitError || !strings.Contains(errOut, "can write the keystore's directory") || !strings.Contains(errOut, "chmod go-w") {
		t.Fatalf("--state in a directory others can write: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(shared, "ks.db")); err == nil {
		t.Fatal("the keystore was created there")
	}
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o777 {
		t.Fatalf("a --state directory was changed: %v", fi.Mode())
	}
	_, errOut, code = e.run("--state", filepath.Join(shared, "sub", "ks.db"), "init", "--base-url", "https://agent.test/poppy/")
	if code != exitError || !strings.Contains(errOut, "where the keystore's directory is") {
		t.Fatalf("a parent others can write: exit %d: %s", code, errOut)
	}

	sticky := filepath.Join(e.dir, "sticky")
	if err := os.Mkdir(sticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	e.mustRun("--state", filepath.Join(sticky, "ks.db"), "init", "--base-url", "https://agent.test/poppy/")
}
