package agenttest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
)

// The recipe "test a command that runs in a child process": the parent
// starts the fake, serves the agent's identity, and runs the command with
// srv.Env(). The child here is this test binary, re-run in a mode chosen by
// envChild; it plays a command with its own main.

const (
	envChild = "AGENTTEST_CHILD" // "proxy" or "client"
	envKey   = "AGENTTEST_KEY"   // the agent's private JWK
)

func init() {
	mode := os.Getenv(envChild)
	if mode == "" {
		return
	}
	if err := child(mode); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// child is the command: it acts for alice at example.test and prints the
// status of one API call.
func child(mode string) error {
	ctx := context.Background()
	key, err := poppy.ParseSigningKey([]byte(os.Getenv(envKey)))
	if err != nil {
		return err
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json", Keys: []*poppy.SigningKey{key},
	})
	if err != nil {
		return err
	}
	opts := &poppy.AgentOptions{Store: keystore.NewMemory()}
	if mode == "client" {
		// A command that imports poppytest in a test hook of its own.
		c, err := poppytest.ClientFromEnv()
		if err != nil {
			return err
		}
		opts.HTTPClient, opts.Clock = c, poppytest.ClockFromEnv()
	}
	// In "proxy" mode: the SDK's default client, as an unmodified binary
	// has it.
	agent, err := poppy.NewAgent(id, opts)
	if err != nil {
		return err
	}
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		return err
	}
	sess, err := c.Session(ctx, "alice", nil)
	if err != nil {
		return err
	}
	resp, err := sess.HTTPClient().Get("https://api.example.test/products")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	fmt.Println("status", resp.StatusCode, "session", sess.ID())
	return nil
}

func runChild(t *testing.T, srv *poppytest.Server, mode string, key *poppy.SigningKey) string {
	t.Helper()
	priv, err := key.MarshalPrivateJWK()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), srv.Env()...)
	cmd.Env = append(cmd.Env, envChild+"="+mode, envKey+"="+string(priv))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child (%s): %v\n%s", mode, err, out)
	}
	return string(out)
}

// An unmodified binary that uses the SDK's default client reaches the fake
// through HTTPS_PROXY, trusting its CA through SSL_CERT_FILE.
func TestChildProcessDefaultClientThroughProxy(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	agenttest.New(t, srv, &agenttest.Options{Key: key})
	out := runChild(t, srv, "proxy", key)
	checkChild(t, srv, out)
}

// A command that calls poppytest.ClientFromEnv reaches the fake directly.
func TestChildProcessClientFromEnv(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	agenttest.New(t, srv, &agenttest.Options{Key: key})
	out := runChild(t, srv, "client", key)
	checkChild(t, srv, out)
}

func checkChild(t *testing.T, srv *poppytest.Server, out string) {
	t.Helper()
	sessions := srv.Sessions().All()
	if len(sessions) != 1 || !strings.Contains(out, "status 200 session "+sessions[0].ID) {
		t.Fatalf("child printed %q; the fake has %d Sessions", out, len(sessions))
	}
	api := srv.RequestsTo(poppytest.EndpointAPI)
	if len(api) != 1 || api[0].Status != http.StatusOK || api[0].Proof == nil {
		t.Fatalf("API requests %v", api)
	}
}

// A process whose environment names no fake gets ErrNoFake.
func TestClientFromEnvWithoutFake(t *testing.T) {
	for _, name := range []string{"POPPYTEST_ADDR", "POPPYTEST_CA", "POPPYTEST_HOSTS"} {
		t.Setenv(name, "")
	}
	if _, err := poppytest.ClientFromEnv(); !errors.Is(err, poppytest.ErrNoFake) {
		t.Fatalf("err = %v, want ErrNoFake", err)
	}
}
