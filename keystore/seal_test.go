package keystore_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/keystore"
)

func sealKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

func newSealer(t *testing.T, keys ...[]byte) *keystore.AESGCMSealer {
	t.Helper()
	s, err := keystore.NewAESGCMSealer(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var sealedKey = keystore.Key{Kind: keystore.KindAccountToken, User: "alice", Issuer: "https://auth.example.com", ID: "main"}

func TestSealRoundTrip(t *testing.T) {
	s := newSealer(t, sealKey())
	plain := []byte("AT-secret-account-token-0123456789")
	sealed, err := keystore.SealValue(s, sealedKey, plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) || bytes.Contains(sealed, []byte("secret")) {
		t.Fatal("sealed value contains the plaintext")
	}
	// Two seals of one value differ (random nonces).
	again, _ := keystore.SealValue(s, sealedKey, plain)
	if bytes.Equal(sealed, again) {
		t.Fatal("sealing twice gave the same bytes")
	}
	got, err := keystore.OpenValue(s, sealedKey, sealed)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("OpenValue = %q, %v", got, err)
	}
	// Empty values stay records: non-nil.
	sealed, _ = keystore.SealValue(s, sealedKey, []byte{})
	got, err = keystore.OpenValue(s, sealedKey, sealed)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty value opened as %#v, %v", got, err)
	}
}

func TestSealOnlySecretKinds(t *testing.T) {
	s := newSealer(t, sealKey())
	for _, kind := range []keystore.Kind{
		keystore.KindUserID, keystore.KindDPoPKey, keystore.KindSession,
		keystore.KindAccountToken, keystore.KindCursor, keystore.KindPendingSignIn,
	} {
		key := sealedKey
		key.Kind = kind
		plain := []byte("value of " + string(kind))
		stored, err := keystore.SealValue(s, key, plain)
		if err != nil {
			t.Fatal(err)
		}
		if sealed := !bytes.Equal(stored, plain); sealed != kind.Secret() {
			t.Errorf("%s: sealed = %v; want %v (Kind.Secret)", kind, sealed, kind.Secret())
		}
		got, err := keystore.OpenValue(s, key, stored)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: OpenValue = %q, %v", kind, got, err)
		}
	}
	// No sealer: values stay as they are.
	if v, _ := keystore.SealValue(nil, sealedKey, []byte("x")); string(v) != "x" {
		t.Fatalf("SealValue with no sealer changed the value: %q", v)
	}
}

func TestSealRotation(t *testing.T) {
	oldKey, newKey := sealKey(), sealKey()
	old := newSealer(t, oldKey)
	rotated := newSealer(t, newKey, oldKey)
	sealedOld, _ := keystore.SealValue(old, sealedKey, []byte("v1"))

	// Every key opens.
	if got, err := keystore.OpenValue(rotated, sealedKey, sealedOld); err != nil || string(got) != "v1" {
		t.Fatalf("rotated sealer opening an old value: %q, %v", got, err)
	}
	// The first key seals, and its ID is in the value.
	sealedNew, _ := keystore.SealValue(rotated, sealedKey, []byte("v2"))
	newID, _ := hex.DecodeString(rotated.KeyIDs()[0])
	oldID, _ := hex.DecodeString(old.KeyIDs()[0])
	if !bytes.Contains(sealedNew[:16], newID) || bytes.Contains(sealedNew[:16], oldID) {
		t.Fatal("the rotated sealer does not seal with its first key")
	}
	if rotated.KeyIDs()[1] != old.KeyIDs()[0] {
		t.Fatal("key IDs depend on more than the key")
	}
	// The old key alone can't open what the new one sealed.
	_, err := keystore.OpenValue(old, sealedKey, sealedNew)
	if !errors.Is(err, keystore.ErrCannotOpen) || !strings.Contains(err.Error(), rotated.KeyIDs()[0]) {
		t.Fatalf("old sealer opening a new value: err = %v, want ErrCannotOpen naming key %s", err, rotated.KeyIDs()[0])
	}
}

func TestSealWrongKeyAndTampering(t *testing.T) {
	secret := []byte("AT-do-not-print-me")
	s := newSealer(t, sealKey())
	sealed, _ := keystore.SealValue(s, sealedKey, secret)

	check := func(name string, sealer keystore.Sealer, key keystore.Key, stored []byte) {
		t.Helper()
		got, err := keystore.OpenValue(sealer, key, stored)
		if !errors.Is(err, keystore.ErrCannotOpen) {
			t.Errorf("%s: OpenValue = %q, %v; want ErrCannotOpen", name, got, err)
			return
		}
		if !strings.HasPrefix(err.Error(), "keystore: ") {
			t.Errorf("%s: error %q does not start with the package name", name, err)
		}
		if strings.Contains(err.Error(), string(secret)) || strings.Contains(err.Error(), "do-not-print") {
			t.Errorf("%s: error shows the value: %v", name, err)
		}
	}
	check("wrong key", newSealer(t, sealKey()), sealedKey, sealed)
	check("no sealer", nil, sealedKey, sealed)
	check("unsealed value", s, sealedKey, secret)
	check("truncated", s, sealedKey, sealed[:20])
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		check(fmt.Sprintf("bit flipped at %d", i), s, sealedKey, bad)
	}
	// Bound to every field of the Key.
	for _, f := range []func(*keystore.Key){
		func(k *keystore.Key) { k.User = "mallory" },
		func(k *keystore.Key) { k.Issuer = "https://evil.example" },
		func(k *keystore.Key) { k.ID = "other" },
		func(k *keystore.Key) { k.Kind = keystore.KindSession },
		// Length-prefixed fields: moving a byte between fields is a change.
		func(k *keystore.Key) { k.User = "alic"; k.Issuer = "ehttps://auth.example.com" },
	} {
		k := sealedKey
		f(&k)
		check("moved to "+k.String(), s, k, sealed)
	}
}

func TestAESGCMSealerKeys(t *testing.T) {
	k := sealKey()
	for name, keys := range map[string][][]byte{
		"none":      nil,
		"16 bytes":  {make([]byte, 16)},
		"33 bytes":  {make([]byte, 33)},
		"duplicate": {k, bytes.Clone(k)},
	} {
		if _, err := keystore.NewAESGCMSealer(keys...); err == nil || !strings.HasPrefix(err.Error(), "keystore: ") {
			t.Errorf("%s: err = %v; want a keystore error", name, err)
		}
	}
	// The sealer copies its keys.
	s := newSealer(t, k)
	sealed, _ := keystore.SealValue(s, sealedKey, []byte("v"))
	k[0] ^= 0xff
	if _, err := keystore.OpenValue(s, sealedKey, sealed); err != nil {
		t.Fatalf("changing the caller's key slice changed the sealer: %v", err)
	}
	// A zero sealer fails instead of panicking.
	if _, err := (&keystore.AESGCMSealer{}).Seal(sealedKey, []byte("v")); err == nil {
		t.Fatal("a zero AESGCMSealer sealed")
	}
}

// Printing or logging a sealer never shows a key.
func TestSealerRedacts(t *testing.T) {
	k := bytes.Repeat([]byte{0xab}, 32)
	s := newSealer(t, k)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("sealer", "s", s)
	outputs := []string{logged.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
		outputs = append(outputs, fmt.Sprintf(verb, s), fmt.Sprintf(verb, *s))
	}
	for _, out := range outputs {
		if strings.Contains(strings.ToLower(out), "abab") || strings.Contains(out, "\xab\xab") || strings.Contains(out, "171") {
			t.Errorf("printed sealer shows the key: %q", out)
		}
		if !strings.Contains(out, s.KeyIDs()[0]) {
			t.Errorf("printed sealer %q does not name its key ID", out)
		}
	}
}

// Keys are rotated by putting the new key first: it seals, and the old one
// still opens what it sealed.
func ExampleNewAESGCMSealer() {
	oldKey := bytes.Repeat([]byte{1}, 32) // in real use: from a secret manager
	newKey := bytes.Repeat([]byte{2}, 32)
	before, err := keystore.NewAESGCMSealer(oldKey)
	if err != nil {
		log.Fatal(err)
	}
	after, err := keystore.NewAESGCMSealer(newKey, oldKey)
	if err != nil {
		log.Fatal(err)
	}
	key := keystore.Key{Kind: keystore.KindAccountToken, User: "alice", Issuer: "https://auth.example.com"}

	stored, _ := keystore.SealValue(before, key, []byte("account token"))
	value, err := keystore.OpenValue(after, key, stored)
	fmt.Printf("%s %v\n", value, err)

	stored, _ = keystore.SealValue(after, key, value)
	_, err = keystore.OpenValue(before, key, stored)
	fmt.Println(errors.Is(err, keystore.ErrCannotOpen))
	fmt.Println(after) // key IDs, never keys
	// Output:
	// account token <nil>
	// true
	// keystore.AESGCMSealer(keys [1735c9e18cd29146 11c4c775fd56e34b])
}
