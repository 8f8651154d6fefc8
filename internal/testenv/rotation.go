package testenv

// Two OS processes renewing Sessions with one rotating Account Token at
// once, sharing one keystore (spec 4.8: a rotated Account Token must never
// be lost). The test binary re-executes itself; RotationChildMain, called
// first in the package's TestMain, does the child's part.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

const (
	envRotationChild  = "POPPY_TEST_ROTATION_CHILD"
	envRotationStore  = "POPPY_TEST_ROTATION_STORE"
	envRotationKey    = "POPPY_TEST_ROTATION_KEY"
	envRotationRounds = "POPPY_TEST_ROTATION_ROUNDS"
	envRotationStart  = "POPPY_TEST_ROTATION_START"
)

// RotationChildMain does a child's part of RotationRace and exits, or
// returns at once in any other process. open opens the store named by the
// spec the parent passed.
func RotationChildMain(open func(spec string) (keystore.Store, error)) {
	name := os.Getenv(envRotationChild)
	if name == "" {
		return
	}
	if err := rotationChild(name, open); err != nil {
		fmt.Fprintln(os.Stderr, "rotation child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func rotationChild(name string, open func(string) (keystore.Store, error)) error {
	ctx := context.Background()
	store, err := open(os.Getenv(envRotationStore))
	if err != nil {
		return err
	}
	if c, ok := store.(interface{ Close() error }); ok {
		defer c.Close()
	}
	c, err := childCompany(ctx, store, envRotationKey)
	if err != nil {
		return err
	}
	s, err := c.Session(ctx, "alice", &poppy.SessionOptions{Name: name})
	if err != nil {
		return err
	}
	// Start together, so the two really race.
	if start, err := time.Parse(time.RFC3339Nano, os.Getenv(envRotationStart)); err == nil {
		time.Sleep(time.Until(start))
	}
	if _, ok, err := s.UseAccountToken(ctx, nil); err != nil || !ok {
		return fmt.Errorf("signing in with the stored Account Token: ok %v, %w", ok, err)
	}
	rounds, _ := strconv.Atoi(os.Getenv(envRotationRounds))
	for i := range rounds {
		tok, err := s.Token(ctx, &poppy.TokenOptions{Renew: true})
		if err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		if !tok.SignedIn {
			return fmt.Errorf("round %d: the Session fell back to signed out: the Account Token was lost", i)
		}
	}
	return nil
}

// RotationRace signs alice in (Mediated Sign-In) with the Account Token
// kept in store, then runs two child processes that each renew a Session of
// their own with that Account Token rounds times while the Company rotates
// it on every use. Nothing may be lost: every refresh succeeds, and the
// Company records no violation. spec is what the children pass to open.
func RotationRace(t *testing.T, store keystore.Store, spec string, rounds int) {
	t.Helper()
	e := New(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, &poppy.AgentOptions{Store: store})
	ctx := context.Background()
	s := e.Session("alice")
	u := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, u); err != nil {
		t.Fatal(err)
	}
	priv, err := e.Key.MarshalPrivateJWK()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(500 * time.Millisecond).Format(time.RFC3339Nano)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]string, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), e.Srv.Env()...)
			cmd.Env = append(cmd.Env,
				envRotationChild+"=child-"+strconv.Itoa(i),
				envRotationStore+"="+spec,
				envRotationKey+"="+string(priv),
				envRotationRounds+"="+strconv.Itoa(rounds),
				envRotationStart+"="+start,
			)
			out, err := cmd.CombinedOutput()
			errs[i], outs[i] = err, string(out)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("child %d: %v\n%s", i, err, outs[i])
		}
	}
	var refreshes, refused int
	for _, r := range e.Requests(poppytest.EndpointToken) {
		if r.Form.Get("grant_type") != "refresh_token" {
			continue
		}
		refreshes++
		if r.Status != 200 {
			refused++
			t.Errorf("refresh %d answered %d %s", r.Index, r.Status, r.ErrorCode)
		}
	}
	if want := 2 * (rounds + 1); refreshes != want {
		t.Errorf("%d refresh grants, want %d", refreshes, want)
	}
	// The Account Token that survived the race still works.
	s2, err := e.Company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s2.UseAccountToken(ctx, nil); !ok || err != nil {
		t.Fatalf("after the race: the Account Token is lost (ok %v, %v)", ok, err)
	}
	if refused > 0 {
		t.Fatalf("%d of %d refreshes refused", refused, refreshes)
	}
}

// childCompany builds, in a child process, the agent that the test
// environment describes (its signing key in the variable keyVar, the fake
// Company from poppytest.ClientFromEnv and ClockFromEnv) on store, and
// resolves example.test.
func childCompany(ctx context.Context, store keystore.Store, keyVar string) (*poppy.Company, error) {
	key, err := poppy.ParseSigningKey([]byte(os.Getenv(keyVar)))
	if err != nil {
		return nil, err
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: ClientID, JWKSURI: JWKS, RedirectURIs: []string{Redirect}, Keys: []*poppy.SigningKey{key}})
	if err != nil {
		return nil, err
	}
	client, err := poppytest.ClientFromEnv()
	if err != nil {
		return nil, err
	}
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{Store: store, HTTPClient: client, Clock: poppytest.ClockFromEnv()})
	if err != nil {
		return nil, err
	}
	return agent.Company(ctx, "example.test")
}
