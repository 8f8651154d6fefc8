package sqlitestore_test

// Attacks on the SQLite store, kept together. The first two
// failed on the code before their fix (commit b9fcb33); the third guards
// what already held there.

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// fileBytes returns the database file and its -wal, as an attacker with a
// copy of the directory would read them.
func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	var all []byte
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// Item 8: after a sign-out whose revocation failed, the deleted (still
// valid) Account Token stayed readable in the file's free pages and in the
// write-ahead log.
func TestAttackDeletedSecretStaysInFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	s := openSQLite(t, path)
	secret := "rt_" + strings.Repeat("Z", 40) + "_still_valid"
	key := keystore.Key{Kind: keystore.KindAccountToken, User: "dana", Issuer: "https://auth.example.com", ID: "default"}
	set(t, s, key, `{"refresh_token":"`+secret+`"}`)
	for i := range 20 { // neighbours on the same page
		set(t, s, keystore.Key{Kind: keystore.KindSession, User: "dana", Issuer: "https://auth.example.com", ID: fmt.Sprint(i)}, strings.Repeat("s", 100))
	}
	if !bytes.Contains(fileBytes(t, path), []byte(secret)) {
		t.Fatal("the secret is not in the file at all: the test proves nothing")
	}
	if err := s.Update(t.Context(), key, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(fileBytes(t, path), []byte(secret)) {
		t.Fatal("a deleted Account Token is still readable in the database or its write-ahead log")
	}
	// And after the store is closed (the process ended).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(fileBytes(t, path), []byte(secret)) {
		t.Fatal("a deleted Account Token is readable in the closed database")
	}
}

// Item 9: Open adopted another program's database (application_id 0),
// created its table there and chmodded it to 0600.
func TestAttackForeignDatabaseUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	execRaw(t, path, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
	if runtime.GOOS != "windows" {
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadFile(path)
	_, err := sqlitestore.Open(path, nil)
	if !errors.Is(err, sqlitestore.ErrForeignDatabase) {
		t.Fatalf("Open of another program's database: %v, want ErrForeignDatabase", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("Open changed the other program's database")
	}
	if fi, _ := os.Stat(path); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o644 {
		t.Fatalf("Open changed its mode to %v", fi.Mode().Perm())
	}
	if _, err := os.Stat(path + "-locks"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open made a lock directory beside it: %v", err)
	}
	db, _ := sql.Open("sqlite", path)
	defer db.Close()
	var tables int
	var mode string
	_ = db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'records'").Scan(&tables)
	_ = db.QueryRow("PRAGMA journal_mode").Scan(&mode)
	if tables != 0 || mode == "wal" {
		t.Fatalf("records tables %d, journal mode %q", tables, mode)
	}
	// A file that isn't SQLite at all is refused the same way.
	junk := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlitestore.Open(junk, nil); err == nil {
		t.Fatal("Open of a non-database file succeeded")
	}
	if fi, _ := os.Stat(junk); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o644 {
		t.Fatalf("Open changed the junk file's mode to %v", fi.Mode().Perm())
	}
	// A new, empty file still becomes a keystore.
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	openSQLite(t, empty)
}

// Item 7: the store and its Sealer print no record and no key.
func TestAttackStorePrintsNoSecret(t *testing.T) {
	keyBytes := bytes.Repeat([]byte{0xAB}, 32)
	sealer, err := keystore.NewAESGCMSealer(keyBytes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "k.db"), &sqlitestore.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var buf bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		fmt.Fprintf(&buf, verb+"\n", s)
	}
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "store", s)
	for _, form := range []string{fmt.Sprintf("%x", keyBytes), strings.Trim(fmt.Sprint(keyBytes), "[]"), string(keyBytes)} {
		if strings.Contains(buf.String(), form) {
			t.Fatalf("the sealing key appears in formatted output:\n%s", buf.String())
		}
	}
}

// What the protection of deleted secrets costs: writing and then deleting
// an Account Token (secure_delete, and a checkpoint that empties the
// write-ahead log after the delete), against writing and deleting a record
// that is not secret (secure_delete only), in the same run.
func BenchmarkDeleteSecret(b *testing.B) {
	for _, kind := range []keystore.Kind{keystore.KindSession, keystore.KindAccountToken} {
		b.Run(string(kind), func(b *testing.B) {
			s := openSQLite(b, filepath.Join(b.TempDir(), "keystore.db"))
			ctx := b.Context()
			key := keystore.Key{Kind: kind, User: "dana", Issuer: "https://auth.example.com", ID: "default"}
			for b.Loop() {
				if err := s.Update(ctx, key, func([]byte) ([]byte, error) { return benchValue, nil }); err != nil {
					b.Fatal(err)
				}
				if err := s.Update(ctx, key, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, keystore.ErrNotFound) {
				b.Fatalf("the record survived its deletion: %v", err)
			}
		})
	}
}
