package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

// SecretsInFormatting is the test that formatting prints no secret, on one store: %+v,
// %s or slog of the store, and of the *Agent holding it, its Identity and
// a signed-in Session, print no Session Token, DPoP private key or PKCE
// verifier, in clear, in hex or as a byte list. The root package runs it
// on keystore.Memory, keystore/sqlitestore (a module of its own) on a
// sealed SQLite store.
func SecretsInFormatting(t *testing.T, store keystore.Store) {
	t.Helper()
	ctx := context.Background()
	e := New(t, nil, &poppy.AgentOptions{Store: store})
	s, err := e.Company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if err := replicaSignIn(ctx, s); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{tok.Value()}
	keys, _ := store.List(ctx, keystore.KindDPoPKey, "alice", e.Srv.Issuer())
	for _, k := range keys {
		b, _ := store.Get(ctx, k)
		var sk struct{ D string }
		_ = json.Unmarshal(b, &sk)
		secrets = append(secrets, sk.D)
	}
	if len(secrets) < 2 || secrets[1] == "" {
		t.Fatal("no DPoP key found to look for")
	}
	// A pending Direct Sign-In holds the PKCE verifier.
	verifier := "pkce-verifier-" + strings.Repeat("V", 43)
	pk := keystore.Key{Kind: keystore.KindPendingSignIn, User: "poppy:signin", Issuer: "poppy:state", ID: "st"}
	if err := store.Update(ctx, pk, func([]byte) ([]byte, error) { return []byte(`{"code_verifier":"` + verifier + `"}`), nil }); err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, verifier)
	var buf bytes.Buffer
	for _, v := range []any{store, e.Agent, e.ID, s} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			fmt.Fprintf(&buf, verb+"\n", v)
		}
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "v", v)
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "v", v)
	}
	out := buf.String()
	for _, sec := range secrets {
		// The secret as it is, in hex, as decimal bytes (%v of a []byte)
		// and as Go hex bytes (%#v of a []byte holding it anywhere).
		goBytes := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%#v", []byte(sec)), "[]byte{"), "}")
		for _, form := range []string{sec, fmt.Sprintf("%x", sec), strings.Trim(fmt.Sprint([]byte(sec)), "[]"), goBytes} {
			if strings.Contains(out, form) {
				t.Fatalf("%T: a secret appears in formatted output:\n%.400s", store, out)
			}
		}
	}
}
