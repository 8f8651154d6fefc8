package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/poppytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// screen is the User's terminal: when the script shows a Device Sign-In
// link, the User opens it (the fake's programmable User approves).
type screen struct {
	srv   *poppytest.Server
	mu    sync.Mutex
	buf   bytes.Buffer
	links int
	err   error
}

var linkRE = regexp.MustCompile(`or open (https://\S+)`)

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if m := linkRE.FindSubmatch(p); m != nil {
		s.links++
		if _, err := s.srv.Browse(context.Background(), string(m[1])); err != nil {
			s.err = err
		}
	}
	return len(p), nil
}

// The script signs in on its first run and reuses the
// sign-in on the second, without any prompt.
func TestRunTwice(t *testing.T) {
	ctx := context.Background()
	srv := poppytest.NewServer(t, nil)
	path := filepath.Join(t.TempDir(), "keystore.db")
	const clientID = "https://agent.test/agent.json"

	// The operator serves the identity with the keys the script keeps.
	store, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := poppy.LoadSigningKeys(ctx, store, "")
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: clientID, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", id.Handler(nil))

	cfg := Config{ClientID: clientID, Domain: "example.test", User: "alice", StorePath: path, APIPath: "/orders",
		HTTPClient: srv.Client(), Clock: srv.Clock()}
	first := &screen{srv: srv}
	if err := run(ctx, cfg, first, strings.NewReader("")); err != nil {
		t.Fatalf("first run: %v\n%s", err, first.buf.String())
	}
	if first.links != 1 || first.err != nil || !strings.Contains(first.buf.String(), "GET /orders: 200") {
		t.Fatalf("first run: %d prompts, %v:\n%s", first.links, first.err, first.buf.String())
	}
	consents := len(srv.SignIn().Consents())

	second := &screen{srv: srv}
	if err := run(ctx, cfg, second, strings.NewReader("")); err != nil {
		t.Fatalf("second run: %v\n%s", err, second.buf.String())
	}
	out := second.buf.String()
	if second.links != 0 || strings.Contains(out, "enter the code") || len(srv.SignIn().Consents()) != consents {
		t.Fatalf("the second run prompted the User:\n%s", out)
	}
	if !strings.Contains(out, "already") || !strings.Contains(out, "GET /orders: 200") {
		t.Fatalf("second run:\n%s", out)
	}
	if n := len(srv.RequestsTo(poppytest.EndpointDevice)); n != 1 {
		t.Fatalf("%d device authorizations, want 1", n)
	}
}

// The API's base URL is the server URL of the Company's OpenAPI
// description, not a guess from the domain: a Company
// reached through its second domain serves its API on api.{first domain}.
func TestAPIBaseFromDescription(t *testing.T) {
	ctx := context.Background()
	srv := poppytest.NewServer(t, &poppytest.Options{Domains: []string{"shop.test", "example.test"}})
	path := filepath.Join(t.TempDir(), "keystore.db")
	const clientID = "https://agent.test/agent.json"
	store, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := poppy.LoadSigningKeys(ctx, store, "")
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: clientID, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", id.Handler(nil))
	cfg := Config{ClientID: clientID, Domain: "example.test", User: "alice", StorePath: path, APIPath: "/orders",
		HTTPClient: srv.Client(), Clock: srv.Clock()}
	scr := &screen{srv: srv}
	if err := run(ctx, cfg, scr, strings.NewReader("")); err != nil {
		t.Fatalf("run: %v\n%s", err, scr.buf.String())
	}
	if !strings.Contains(scr.buf.String(), "GET /orders: 200") {
		t.Fatalf("run:\n%s", scr.buf.String())
	}
	var got []string
	for _, r := range srv.RequestsTo(poppytest.EndpointAPI) {
		got = append(got, r.Method+" "+r.URL)
	}
	if want := "GET https://api.shop.test/orders"; !slices.Contains(got, want) {
		t.Fatalf("API requests %q, want %q among them", got, want)
	}
}
