package poppytest_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// childGet is the test binary as a child process (see TestMain): it GETs
// the URL with Go's default client, configured only by the environment,
// and prints the status.
func childGet() {
	u := os.Getenv("POPPYTEST_TEST_GET")
	resp, err := http.Get(u)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(b), `"protocol_version"`))
	os.Exit(0)
}

// Env's shell recipe works as the doc writes it: every
// value is one line, the list written to a file is exported by
//
//	while IFS= read -r kv; do export "$kv"; done < fake.env
//
// with each value intact, and an unmodified program given only
// HTTPS_PROXY, SSL_CERT_FILE and NO_PROXY from it reaches the fake over
// verified TLS.
func TestEnvShellRecipe(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	srv := poppytest.NewServer(t, nil)
	env := srv.Env()
	for _, kv := range env {
		if strings.ContainsAny(kv, "\r\n") {
			t.Fatalf("a value of Env spans lines: %q", kv)
		}
	}
	// ClientFromEnv still reads what Env writes.
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	c, err := poppytest.ClientFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(srv.URL() + "/.well-known/poppy.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.CloseIdleConnections()

	dir := t.TempDir()
	file := filepath.Join(dir, "fake.env")
	if err := os.WriteFile(file, []byte(strings.Join(env, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
while IFS= read -r kv; do export "$kv"; done < "$1"
env > "$2"
exec env -i PATH="$PATH" HTTPS_PROXY="$HTTPS_PROXY" SSL_CERT_FILE="$SSL_CERT_FILE" NO_PROXY="$NO_PROXY" POPPYTEST_TEST_GET="$3" "$4"`
	out, err := exec.Command(sh, "-c", script, "sh", file, filepath.Join(dir, "exported"), srv.URL()+"/.well-known/poppy.json", exe).CombinedOutput()
	if err != nil {
		t.Fatalf("the recipe: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "200 true" {
		t.Fatalf("the child with HTTPS_PROXY, SSL_CERT_FILE and NO_PROXY only: %s", out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "exported"))
	if err != nil {
		t.Fatal(err)
	}
	exported := envMap(strings.Split(string(b), "\n"))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if got, ok := exported[k]; !ok || got != v {
			t.Errorf("exported %s=%q, want %q", k, got, v)
		}
	}
}
