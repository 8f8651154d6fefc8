package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/realtest"
)

// fakeProcess is a "poppy fake" started as a process of its own.
type fakeProcess struct {
	cmd    *exec.Cmd
	env    map[string]string
	lines  []string // the environment lines as printed
	stderr *bytes.Buffer
}

// startFakeProcess runs the unmodified command (the test binary as poppy,
// see TestMain) and reads the environment it prints.
func startFakeProcess(t *testing.T, args ...string) *fakeProcess {
	t.Helper()
	cmd := exec.Command("poppy", append([]string{"fake"}, args...)...)
	cmd.Env = cleanEnv(t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProcess{cmd: cmd, env: map[string]string{}, stderr: &bytes.Buffer{}}
	cmd.Stderr = f.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			f.lines = append(f.lines, line)
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				done <- fmt.Errorf("not NAME=value: %q", line)
				return
			}
			f.env[k] = shellUnquote(v)
			if k == "POPPY_FAKE_DOMAIN" {
				done <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		done <- fmt.Errorf("poppy fake ended: %v; stderr: %s", sc.Err(), f.stderr)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("poppy fake printed no environment in 60 s; stderr: %s", f.stderr)
	}
	return f
}

// stop interrupts the fake and returns its exit code.
func (f *fakeProcess) stop(t *testing.T) int {
	t.Helper()
	_ = f.cmd.Process.Signal(syscall.SIGINT)
	err := f.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// with returns the test's environment plus the named variables of the
// fake's (all of them with no names).
func (f *fakeProcess) with(t *testing.T, names ...string) []string {
	env := cleanEnv(t)
	if len(names) == 0 {
		for k := range f.env {
			names = append(names, k)
		}
	}
	for _, k := range names {
		env = append(env, k+"="+f.env[k])
	}
	return env
}

// cleanEnv is the process environment without proxy or CA variables, and
// with a config directory of the test's own.
func cleanEnv(t *testing.T) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE",
			"REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "NODE_USE_ENV_PROXY", "XDG_CONFIG_HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "XDG_CONFIG_HOME="+filepath.Join(t.TempDir(), "config"))
}

// shellUnquote undoes shellQuote.
func shellUnquote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], `'\''`, "'")
	}
	return s
}

// TestFakeEnvironment: every line poppy fake prints is NAME=value on one
// line, and a POSIX shell exports them as written.
func TestFakeEnvironment(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "my ca's dir", "ca.pem") // a path that needs quoting
	if err := os.MkdirAll(filepath.Dir(caFile), 0o755); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "fake.env")
	f := startFakeProcess(t, "--ca-file", caFile, "--env-file", envFile)
	for _, name := range []string{"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "POPPY_FAKE_PAGE"} {
		if _, ok := f.env[name]; !ok {
			t.Errorf("poppy fake printed no %s", name)
		}
	}
	if f.env["SSL_CERT_FILE"] != caFile {
		t.Errorf("SSL_CERT_FILE %q, want %q", f.env["SSL_CERT_FILE"], caFile)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil || !bytes.Contains(pem, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("no CA certificate at %s: %v", caFile, err)
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		out, err := exec.Command(sh, "-c", `set -a; . "$1"; set +a; printf '%s\n%s\n' "$SSL_CERT_FILE" "$HTTPS_PROXY"`, "sh", envFile).CombinedOutput()
		if err != nil {
			t.Fatalf("sourcing the env file: %v: %s", err, out)
		}
		if got := string(out); got != caFile+"\n"+f.env["HTTPS_PROXY"]+"\n" {
			t.Errorf("the shell read %q", got)
		}
	}
	if code := f.stop(t); code != 0 {
		t.Errorf("poppy fake exited %d after Ctrl-C with no violation; stderr: %s", code, f.stderr)
	}
}

// TestFakeCurl: an unmodified curl reaches the fake through the printed
// environment: HTTPS_PROXY and CURL_CA_BUNDLE alone are enough.
func TestFakeCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		realtest.Missing(t, "curl", "no curl on PATH (install the Debian package curl, as .ci/run does)")
	}
	f := startFakeProcess(t)
	cmd := exec.Command(curl, "-sS", "--fail", "--max-time", "20", "https://example.test/.well-known/poppy.json")
	cmd.Env = f.with(t, "HTTPS_PROXY", "CURL_CA_BUNDLE", "NO_PROXY")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v: %s", err, out)
	}
	var doc struct {
		Organization struct{ Domain string } `json:"organization"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || doc.Organization.Domain != "example.test" {
		t.Fatalf("curl got %s (%v)", out, err)
	}
	// Without the CA variable curl refuses the fake's certificate: the
	// variable, not something else, made it trust the fake.
	cmd = exec.Command(curl, "-sS", "--fail", "--max-time", "20", "https://example.test/.well-known/poppy.json")
	cmd.Env = append(f.with(t, "HTTPS_PROXY", "NO_PROXY"), "CURL_CA_BUNDLE=/nonexistent", "SSL_CERT_FILE=/nonexistent")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("curl trusted the fake without its CA: %s", out)
	}
	// A request an agent must never send (an API request without a
	// Session Token) is a violation, and the fake exits 1 naming it.
	cmd = exec.Command(curl, "-sS", "--max-time", "20", "https://api.example.test/products")
	cmd.Env = f.with(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("curl: %v: %s", err, out)
	}
	if code := f.stop(t); code != 1 || !strings.Contains(f.stderr.String(), "violation PA-4.3-23") {
		t.Errorf("poppy fake exited %d; stderr: %s", code, f.stderr)
	}
}

// TestFakePythonAndNode: Python requests (REQUESTS_CA_BUNDLE and
// HTTPS_PROXY) and Node's TLS (NODE_EXTRA_CA_CERTS, through a CONNECT
// tunnel to the printed proxy) trust the fake.
func TestFakePythonAndNode(t *testing.T) {
	f := startFakeProcess(t)
	ran := 0
	if py, err := exec.LookPath("python3"); err == nil && exec.Command(py, "-c", "import requests").Run() == nil {
		ran++
		cmd := exec.Command(py, "-c", `import requests; print(requests.get("https://example.test/.well-known/poppy.json", timeout=20).json()["organization"]["domain"])`)
		cmd.Env = f.with(t, "HTTPS_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE")
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "example.test" {
			t.Errorf("python requests: %v: %s", err, out)
		}
	} else {
		t.Log("no python3 with requests: that client is not tried")
	}
	if node, err := exec.LookPath("node"); err == nil {
		ran++
		script := `
const http = require('http'), https = require('https');
const p = new URL(process.env.HTTPS_PROXY);
http.request({host: p.hostname, port: p.port, method: 'CONNECT', path: 'example.test:443'}).on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.error('CONNECT', res.statusCode); process.exit(1); }
  https.get({host: 'example.test', path: '/.well-known/poppy.json', socket, agent: false}, r => {
    let b = ''; r.on('data', d => b += d); r.on('end', () => { console.log(JSON.parse(b).organization.domain); socket.destroy(); });
  }).on('error', e => { console.error(e.message); process.exit(1); });
}).end();`
		cmd := exec.Command(node, "-e", script)
		cmd.Env = f.with(t, "HTTPS_PROXY", "NODE_EXTRA_CA_CERTS")
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "example.test" {
			t.Errorf("node: %v: %s", err, out)
		}
	} else {
		t.Log("no node: that client is not tried")
	}
	if ran == 0 {
		t.Skip("neither python3 with requests nor node is installed")
	}
	if code := f.stop(t); code != 0 {
		t.Errorf("poppy fake exited %d; stderr: %s", code, f.stderr)
	}
}

// TestCheckAgainstFakeProcess: poppy check, an unmodified process, against
// poppy fake, another, through the printed environment: the check's
// identity is served by the check on loopback and reached by the fake as
// https://agent.test/ (--agent); 0 failures, and the fake saw no
// violation.
func TestCheckAgainstFakeProcess(t *testing.T) {
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	f := startFakeProcess(t, "--agent", "agent.test=http://"+addr, "--conversations.streaming", "--tokens.require-nonce")
	cmd := exec.Command("poppy", "--json", "check", "example.test", "--agent-url", "https://agent.test/check/", "--listen", addr)
	cmd.Env = f.with(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("poppy check: %v\n%s\n%s", err, out, stderr.String())
	}
	var rep struct {
		Results []struct{ Rule, Status string }
		Aborted string
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("poppy check --json printed %s: %v", out, err)
	}
	passed := 0
	for _, r := range rep.Results {
		switch r.Status {
		case "failed":
			t.Errorf("%s failed", r.Rule)
		case "passed":
			passed++
		}
	}
	if passed < 70 || rep.Aborted != "" {
		t.Errorf("%d rules passed, aborted %q", passed, rep.Aborted)
	}
	if code := f.stop(t); code != 0 {
		t.Errorf("poppy fake exited %d: the check broke a rule; stderr: %s", code, f.stderr)
	}
}
