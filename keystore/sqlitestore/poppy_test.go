package sqlitestore_test

// The root package's tests that need a store on disk shared by processes,
// or sealed on disk, run here on SQLite, so that the root module does not
// require this one (docs/layout.md, Modules). internal/testenv holds
// their harness; TestMain runs its child processes.

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// Two OS processes sharing one SQLite keystore renew with one Account Token
// that the Company rotates on every use: none is lost (PA-4.8-04, PA-4.8-05).
func TestPA_4_8_05_TwoProcessesRotation(t *testing.T) {
	path := t.TempDir() + "/keystore.db"
	store, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	testenv.RotationRace(t, store, path, 200)
}

// A caller that gives up after the Company rotated the Account Token, or
// used up a sign-in's code, and before the SDK read the answer, with the
// Session kept in SQLite: the User stays signed in (PA-4.8-04; PA-4.5-10
// and PA-4.6-08 for the sign-in completions; internal/testenv's
// CallerGivesUp).
func TestPA_4_8_04_CallerGivesUpSQLite(t *testing.T) {
	testenv.CallerGivesUp(t, func(t *testing.T) keystore.Store {
		store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "keystore.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	})
}

// Three OS processes on one SQLite keystore serve 20 signed-in Users whose
// Account Tokens rotate on every use, with Session Tokens of 2 s; one
// replica crashes between the Company rotating a token and the store
// saving it, another is killed at random. No User ends stuck, the lost
// rotation ends in sign_in_required and a working signed-out Session, and
// before the kills the replicas refresh once per lifetime (PA-4.8-04,
// PA-4.8-05, PA-4.8-06).
func TestReplicasSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run of about 10 s")
	}
	path := t.TempDir() + "/keystore.db"
	store, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	testenv.ReplicaRun(t, store, path, &testenv.ReplicaOptions{Kills: true})
}

// The agent's signing keys are created once and loaded again by a later
// process; rotation keeps the previous key published (spec 4.1).
func TestSigningKeysInKeystore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ks.db")
	sealer, err := keystore.NewAESGCMSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	open := func() *sqlitestore.Store {
		s, err := sqlitestore.Open(path, &sqlitestore.Options{Sealer: sealer})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1 := open()
	first, err := poppy.LoadSigningKeys(ctx, s1, "")
	if err != nil {
		t.Fatal(err)
	}
	s1.Close()
	// A second process (a second open of the file) loads the same key.
	s2 := open()
	defer s2.Close()
	again, err := poppy.LoadSigningKeys(ctx, s2, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || len(again) != 1 || first[0].KeyID() != again[0].KeyID() {
		t.Fatalf("keys not reused: %v then %v", first, again)
	}
	// The private key is a secret record, sealed on disk.
	if !keystore.KindAgentKey.Secret() {
		t.Fatal("KindAgentKey is not a secret kind")
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var raw []byte
	if err := db.QueryRow(`SELECT value FROM records WHERE kind = ?`, string(keystore.KindAgentKey)).Scan(&raw); err != nil {
		t.Fatalf("reading the raw record: %v", err)
	}
	if bytes.Contains(raw, []byte(`"d"`)) || bytes.Contains(raw, []byte(first[0].KeyID())) {
		t.Fatal("the signing key is stored in clear")
	}

	rot, err := poppy.RotateSigningKeys(ctx, s2, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rot) != 2 || rot[1].KeyID() != first[0].KeyID() || rot[0].KeyID() == first[0].KeyID() {
		t.Fatalf("rotation: %v, want a new key then %s", rot, first[0].KeyID())
	}
	rot2, err := poppy.RotateSigningKeys(ctx, s2, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rot2) != 2 || rot2[1].KeyID() != rot[0].KeyID() {
		t.Fatalf("second rotation: %v, want a new key then %s", rot2, rot[0].KeyID())
	}
	loaded, _ := poppy.LoadSigningKeys(ctx, s2, "")
	if loaded[0].KeyID() != rot2[0].KeyID() {
		t.Fatal("LoadSigningKeys does not return the rotated set")
	}
}

// Secrets in formatting on a sealed SQLite store: %+v, %s or slog of the
// store, and of the *Agent holding it, print no token, DPoP private key
// or PKCE verifier. The root package's TestAttackSecretsInFormatting runs
// the same on keystore.Memory.
func TestAttackSecretsInFormatting(t *testing.T) {
	sealer, err := keystore.NewAESGCMSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sq, err := sqlitestore.Open(t.TempDir()+"/k.db", &sqlitestore.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	testenv.SecretsInFormatting(t, sq)
}
