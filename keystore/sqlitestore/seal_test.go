package sqlitestore_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

func aesKey(t testing.TB) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func openSealed(t testing.TB, path string, keys ...[]byte) *sqlitestore.Store {
	t.Helper()
	sealer, err := keystore.NewAESGCMSealer(keys...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.Open(path, &sqlitestore.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSQLiteContractSealed(t *testing.T) {
	key := aesKey(t)
	storetest.Run(t, func(t *testing.T) keystore.Store {
		return openSealed(t, filepath.Join(t.TempDir(), "keystore.db"), key)
	})
}

// Secret records are sealed in the file; rotation keeps old records
// readable and seals new writes with the new key; the wrong key fails
// without showing the value.
func TestSQLiteSealing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	oldKey, newKey := aesKey(t), aesKey(t)
	secret := keystore.Key{Kind: keystore.KindAccountToken, User: "dana", Issuer: "https://auth.example.com"}
	plain := keystore.Key{Kind: keystore.KindUserID, User: "dana", Issuer: "https://auth.example.com"}
	const token = "pat_8Hk2-secret-account-token"
	s := openSealed(t, path, oldKey)
	set(t, s, secret, token)
	set(t, s, plain, "usr_visible")
	s.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if wal, err := os.ReadFile(path + "-wal"); err == nil {
		raw = append(raw, wal...)
	}
	if bytes.Contains(raw, []byte(token)) {
		t.Fatal("the Account Token is in the file in clear")
	}
	if !bytes.Contains(raw, []byte("usr_visible")) {
		t.Fatal("a non-secret record is not where the test looks: the check proves nothing")
	}
	// Rotation: the new key seals, the old one still opens.
	r := openSealed(t, path, newKey, oldKey)
	wantValue(t, r, secret, token)
	set(t, r, secret, token+"-2")
	r.Close()
	n := openSealed(t, path, newKey)
	wantValue(t, n, secret, token+"-2")
	n.Close()
	// The wrong key: a clear error, never the value.
	w := openSealed(t, path, aesKey(t))
	_, err = w.Get(t.Context(), secret)
	if !errors.Is(err, keystore.ErrCannotOpen) || bytes.Contains([]byte(err.Error()), []byte(token)) {
		t.Fatalf("wrong key: %v", err)
	}
}
