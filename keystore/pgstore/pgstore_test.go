package pgstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/pgstore"
)

// The tests run against the server named by POPPY_TEST_POSTGRES_URL, which
// .ci/postgres.sh starts. Without it they skip, unless POPPY_TEST_REAL=1 asks
// for every real component, in which case they fail.
const urlEnv = "POPPY_TEST_POSTGRES_URL"

func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		realtest.Missing(tb, "PostgreSQL", urlEnv+" is not set (source .ci/postgres.sh to start a server)")
	}
	return u
}

// testPool returns a pool on the test server, closed when the test ends.
func testPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(testURL(tb))
	if err != nil {
		tb.Fatalf("parse %s: %v", urlEnv, err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// testTable returns a table name of its own for one test, and drops the
// table and its version table when the test ends.
func testTable(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	name := "poppy_test_" + randomHex(6)
	tb.Cleanup(func() { dropTable(tb, pool, "", name) })
	return name
}

func dropTable(tb testing.TB, pool *pgxpool.Pool, schema, name string) {
	tb.Helper()
	for _, n := range []string{name, name + "_version"} {
		id := pgx.Identifier{n}
		if schema != "" {
			id = pgx.Identifier{schema, n}
		}
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+id.Sanitize()); err != nil {
			tb.Errorf("drop %s: %v", n, err)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newStore(tb testing.TB, pool *pgxpool.Pool, opts *pgstore.Options) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.New(pool, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() }) // its lock connections
	return s
}

func put(tb testing.TB, s keystore.Store, key keystore.Key, value []byte) {
	tb.Helper()
	err := s.Update(context.Background(), key, func([]byte) ([]byte, error) { return value, nil })
	if err != nil {
		tb.Fatalf("update %s: %v", key, err)
	}
}

var testKey = keystore.Key{Kind: keystore.KindAccountToken, User: "alice", Issuer: "https://auth.example.com", ID: "main"}

func TestOpenCreatesSchemaAndRoundTrips(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testURL(t), &pgstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := pool.QueryRow(ctx, `SELECT max(version) FROM `+pgx.Identifier{table + "_version"}.Sanitize()).Scan(&v); err != nil {
		t.Fatalf("Open did not create the version table: %v", err)
	}
	if v != pgstore.SchemaVersion {
		t.Fatalf("schema version %d, want %d", v, pgstore.SchemaVersion)
	}
	put(t, s, testKey, []byte("token"))
	got, err := s.Get(ctx, testKey)
	if err != nil || string(got) != "token" {
		t.Fatalf("Get = %q, %v", got, err)
	}
}

func TestOpenDoesNotEchoPassword(t *testing.T) {
	for _, cs := range []string{
		"postgres://user:hunter2-secret@127.0.0.1:notaport/db",
		"host=127.0.0.1 password=hunter2-secret port=notaport",
	} {
		_, err := pgstore.Open(context.Background(), cs, nil)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", cs)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the password: %v", err)
		}
		if !strings.HasPrefix(err.Error(), "pgstore: ") {
			t.Errorf("error %q does not start with the package name", err)
		}
	}
}

// Replicas starting at once must not race to create the schema: without the
// advisory lock, concurrent CREATE TABLE and version inserts collide.
func TestMigrateConcurrentReplicas(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	for round := range 3 {
		table := testTable(t, pool)
		const replicas = 8
		var wg sync.WaitGroup
		errs := make(chan error, replicas)
		start := make(chan struct{})
		for range replicas {
			wg.Go(func() {
				<-start
				s, err := pgstore.Open(ctx, testURL(t), &pgstore.Options{Table: table})
				if err != nil {
					errs <- err
					return
				}
				s.Close()
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: replica failed to start: %v", round, err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table + "_version"}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != pgstore.SchemaVersion {
			t.Fatalf("round %d: %d version rows, want %d (one per migration)", round, n, pgstore.SchemaVersion)
		}
	}
}

func TestMigrateIdempotentKeepsRecords(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	opts := &pgstore.Options{Table: table}
	put(t, newStore(t, pool, opts), testKey, []byte("kept"))
	// A second store, as after a restart, migrates again and finds the schema current.
	got, err := newStore(t, pool, opts).Get(context.Background(), testKey)
	if err != nil || string(got) != "kept" {
		t.Fatalf("after a second migration Get = %q, %v", got, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	ctx := context.Background()
	put(t, newStore(t, pool, &pgstore.Options{Table: table}), testKey, []byte("x"))
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{table + "_version"}.Sanitize()+` (version) VALUES (99)`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, &pgstore.Options{Table: table})
	_, err := s.Get(ctx, testKey)
	if err == nil || !strings.Contains(err.Error(), "newer") || !strings.HasPrefix(err.Error(), "pgstore: ") {
		t.Fatalf("Get on a schema from a newer SDK: err = %v, want a pgstore error saying it is newer", err)
	}
}

func TestTableAndSchemaNamesAreQuoted(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	schema := `poppy "test" ` + randomHex(4)
	table := `records"; DROP TABLE x; --`
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	s := newStore(t, pool, &pgstore.Options{Schema: schema, Table: table})
	put(t, s, testKey, []byte("quoted"))
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("table %q in schema %q: %d rows, %v; want 1", table, schema, n, err)
	}
}

func TestDefaultTable(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	// Use a schema of its own so that the default name does not clash with
	// another test run on the same server.
	schema := "poppy_default_" + randomHex(4)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	put(t, newStore(t, pool, &pgstore.Options{Schema: schema}), testKey, []byte("x"))
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.poppy_keystore`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("default table poppy_keystore: %d rows, %v", n, err)
	}
}

func TestBadNames(t *testing.T) {
	// The pool connects lazily: no server is needed.
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, o := range []pgstore.Options{
		{Table: strings.Repeat("t", 56)},
		{Table: "a\x00b"},
		{Schema: strings.Repeat("s", 64)},
		{Table: "\xff"},
	} {
		if _, err := pgstore.New(pool, &o); err == nil || !strings.HasPrefix(err.Error(), "pgstore: ") {
			t.Errorf("New(%+v) err = %v, want a pgstore error", o, err)
		}
	}
	if _, err := pgstore.New(pool, &pgstore.Options{Table: strings.Repeat("t", 55)}); err != nil {
		t.Errorf("a 55-byte table name is refused: %v", err)
	}
}

func TestKeysThePostgresTextTypeCannotHold(t *testing.T) {
	pool := testPool(t)
	s := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	for _, k := range []keystore.Key{
		{Kind: keystore.KindCursor, User: "a\x00b", Issuer: "https://i"},
		{Kind: keystore.KindCursor, User: "a", Issuer: "https://i", ID: "\xff"},
	} {
		err := s.Update(context.Background(), k, func([]byte) ([]byte, error) {
			t.Errorf("fn called for the invalid key %q", k)
			return nil, nil
		})
		if err == nil || !strings.HasPrefix(err.Error(), "pgstore: ") {
			t.Errorf("Update(%q) err = %v, want a pgstore error", k, err)
		}
	}
}

// gate is a channel closed once, by Release or when the test ends, so that
// a failing test leaves no Update waiting in fn (and its transaction open).
type gate struct {
	C    chan struct{}
	once sync.Once
}

func releaser(t *testing.T) *gate {
	g := &gate{C: make(chan struct{})}
	t.Cleanup(g.Release)
	return g
}

func (g *gate) Release() { g.once.Do(func() { close(g.C) }) }

// waitForLockWaiter waits until an Update of s waits for a lock another
// process (here: another store) holds, failing if stop is closed first.
func waitForLockWaiter(t *testing.T, s *pgstore.Store, stop <-chan struct{}) {
	t.Helper()
	for s.Stats().Waiting == 0 {
		select {
		case <-stop:
			t.Fatal("the second Update went ahead while the first held the lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// The lock must exist before the row does: two replicas creating the same
// record must not both see nil.
func TestUpdateLocksAKeyWithNoRecordYet(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	a := newStore(t, pool, &pgstore.Options{Table: table})
	b := newStore(t, pool, &pgstore.Options{Table: table}) // another replica
	ctx := context.Background()
	entered, release := make(chan struct{}), releaser(t)
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- a.Update(ctx, testKey, func(cur []byte) ([]byte, error) {
			close(entered)
			<-release.C
			return []byte("first"), nil
		})
	}()
	select {
	case <-entered:
	case err := <-firstDone: // it never took the lock (no database, say)
		t.Fatalf("the first Update: %v", err)
	}
	secondCalled := make(chan struct{})
	var sawCurrent []byte
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- b.Update(ctx, testKey, func(cur []byte) ([]byte, error) {
			sawCurrent = cur
			close(secondCalled)
			return append(cur, "+second"...), nil
		})
	}()
	waitForLockWaiter(t, b, secondCalled)
	release.Release()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if string(sawCurrent) != "first" {
		t.Fatalf("second fn saw %q, want the first update's value", sawCurrent)
	}
	got, _ := a.Get(ctx, testKey)
	if string(got) != "first+second" {
		t.Fatalf("record = %q, want first+second", got)
	}
}

func TestUpdateStopsWaitingWhenCtxIsDone(t *testing.T) {
	pool := testPool(t)
	s := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	ctx := context.Background()
	entered, release := make(chan struct{}), releaser(t)
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- s.Update(ctx, testKey, func([]byte) ([]byte, error) {
			close(entered)
			<-release.C
			return []byte("first"), nil
		})
	}()
	select {
	case <-entered:
	case err := <-firstDone: // it never took the lock (no database, say)
		t.Fatalf("the first Update: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := s.Update(wctx, testKey, func([]byte) ([]byte, error) {
		t.Error("fn called although the lock was held until ctx was done")
		return nil, nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Update waiting past its deadline: err = %v, want context.DeadlineExceeded", err)
	}
	release.Release()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	// The abandoned wait left no lock behind.
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	defer qcancel()
	put(t, s, testKey, []byte("after"))
	if got, err := s.Get(qctx, testKey); err != nil || string(got) != "after" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// And an Update with a ctx already done never calls fn.
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if err := s.Update(done, testKey, func([]byte) ([]byte, error) {
		t.Error("fn called with a done ctx")
		return nil, nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a done ctx: err = %v, want context.Canceled", err)
	}
}

// Once fn has renewed a token, the store writes it even if ctx ended during
// the renewal: dropping it would lose a rotated Account Token (spec 4.8).
func TestUpdateWritesFnResultAfterCtxIsDone(t *testing.T) {
	pool := testPool(t)
	s := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	ctx, cancel := context.WithCancel(context.Background())
	err := s.Update(ctx, testKey, func([]byte) ([]byte, error) {
		cancel() // the deadline passes while the Company answers
		return []byte("rotated"), nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	got, err := s.Get(context.Background(), testKey)
	if err != nil || string(got) != "rotated" {
		t.Fatalf("Get = %q, %v; the rotated token was lost", got, err)
	}
}

func TestEmptyValueIsARecord(t *testing.T) {
	pool := testPool(t)
	s := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	sealer := testSealer(t, 1)
	sealed := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool), Sealer: sealer})
	for _, st := range []*pgstore.Store{s, sealed} {
		put(t, st, testKey, []byte{})
		got, err := st.Get(context.Background(), testKey)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Get = %#v, %v; want an empty non-nil record", got, err)
		}
		var saw []byte
		st.Update(context.Background(), testKey, func(cur []byte) ([]byte, error) {
			saw = cur
			return cur, nil
		})
		if saw == nil {
			t.Fatal("fn got nil for an empty record; nil means no record")
		}
	}
}

func TestUpdateSerializesAcrossPools(t *testing.T) {
	// Two pools are as two replicas; the contract suite covers one store.
	table := testTable(t, testPool(t))
	stores := []*pgstore.Store{
		newStore(t, testPool(t), &pgstore.Options{Table: table}),
		newStore(t, testPool(t), &pgstore.Options{Table: table}),
	}
	const each = 50
	var wg sync.WaitGroup
	for i := range 10 {
		s := stores[i%2]
		wg.Go(func() {
			for range each {
				if err := s.Update(context.Background(), testKey, increment); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := stores[0].Get(context.Background(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != fmt.Sprint(10*each) {
		t.Fatalf("counter = %s after %d increments", got, 10*each)
	}
}

// increment treats the record as a decimal counter.
func increment(cur []byte) ([]byte, error) {
	var n int
	if cur != nil {
		if _, err := fmt.Sscan(string(cur), &n); err != nil {
			return nil, err
		}
	}
	return []byte(fmt.Sprint(n + 1)), nil
}

func testSealer(tb testing.TB, n int) *keystore.AESGCMSealer {
	tb.Helper()
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = make([]byte, 32)
		rand.Read(keys[i])
	}
	s, err := keystore.NewAESGCMSealer(keys...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// rawValue reads a row's stored bytes, bypassing the store.
func rawValue(t *testing.T, pool *pgxpool.Pool, table string, key keystore.Key) []byte {
	t.Helper()
	var v []byte
	err := pool.QueryRow(context.Background(),
		`SELECT value FROM `+pgx.Identifier{table}.Sanitize()+` WHERE kind = $1 AND local_user = $2 AND issuer = $3 AND record_id = $4`,
		string(key.Kind), key.User, key.Issuer, key.ID).Scan(&v)
	if err != nil {
		t.Fatalf("raw row %s: %v", key, err)
	}
	return v
}

func TestSealedAtRest(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	sealer := testSealer(t, 1)
	s := newStore(t, pool, &pgstore.Options{Table: table, Sealer: sealer})
	ctx := context.Background()
	plaintext := []byte(`{"token":"AT-very-secret-account-token"}`)
	for _, kind := range []keystore.Kind{keystore.KindAccountToken, keystore.KindDPoPKey, keystore.KindSession, keystore.KindPendingSignIn, keystore.KindCursor, keystore.KindUserID} {
		key := testKey
		key.Kind = kind
		put(t, s, key, plaintext)
		raw := rawValue(t, pool, table, key)
		if kind.Secret() {
			if bytes.Contains(raw, plaintext) || bytes.Contains(raw, []byte("very-secret")) {
				t.Errorf("%s: the table holds the plaintext", kind)
			}
			if !bytes.Contains(raw, mustHex(t, sealer.KeyIDs()[0])) {
				t.Errorf("%s: the stored value does not name the sealing key", kind)
			}
		} else if !bytes.Equal(raw, plaintext) {
			t.Errorf("%s is not secret but is stored as %q", kind, raw)
		}
		got, err := s.Get(ctx, key)
		if err != nil || !bytes.Equal(got, plaintext) {
			t.Errorf("%s: Get = %q, %v", kind, got, err)
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

func sealerOf(tb testing.TB, keys ...[]byte) *keystore.AESGCMSealer {
	tb.Helper()
	s, err := keystore.NewAESGCMSealer(keys...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestSealRotation(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	ctx := context.Background()
	oldKey, newKey := randomKey(), randomKey()
	before := newStore(t, pool, &pgstore.Options{Table: table, Sealer: sealerOf(t, oldKey)})
	// The application rotates: the new key first, the old one kept to open.
	rotated := sealerOf(t, newKey, oldKey)
	after := newStore(t, pool, &pgstore.Options{Table: table, Sealer: rotated})
	put(t, before, testKey, []byte("sealed-with-old"))

	// The old key still opens what it sealed.
	got, err := after.Get(ctx, testKey)
	if err != nil || string(got) != "sealed-with-old" {
		t.Fatalf("after rotation Get = %q, %v", got, err)
	}
	// A new write uses the new key...
	put(t, after, testKey, []byte("sealed-with-new"))
	raw := rawValue(t, pool, table, testKey)
	if !bytes.Contains(raw[:16], mustHex(t, rotated.KeyIDs()[0])) {
		t.Fatal("a write after rotation is not sealed with the new key")
	}
	// ...which a store with only the old key can't open, saying why but
	// not showing the value.
	_, err = before.Get(ctx, testKey)
	if !errors.Is(err, keystore.ErrCannotOpen) || !strings.HasPrefix(err.Error(), "pgstore: ") {
		t.Fatalf("old-key store reading a new-key record: err = %v, want a pgstore error matching ErrCannotOpen", err)
	}
	if strings.Contains(err.Error(), "sealed-with") {
		t.Fatalf("the error shows the value: %v", err)
	}
	// Once every record is rewritten the old key can go.
	got, err = newStore(t, pool, &pgstore.Options{Table: table, Sealer: sealerOf(t, newKey)}).Get(ctx, testKey)
	if err != nil || string(got) != "sealed-with-new" {
		t.Fatalf("new-key-only Get = %q, %v", got, err)
	}
}

func TestSealWrongKeyOrNoKey(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	ctx := context.Background()
	secret := "AT-wrong-key-test-secret"
	put(t, newStore(t, pool, &pgstore.Options{Table: table, Sealer: testSealer(t, 1)}), testKey, []byte(secret))
	for name, sealer := range map[string]keystore.Sealer{
		"wrong key": testSealer(t, 2),
		"no sealer": nil,
	} {
		s := newStore(t, pool, &pgstore.Options{Table: table, Sealer: sealer})
		_, err := s.Get(ctx, testKey)
		if !errors.Is(err, keystore.ErrCannotOpen) {
			t.Errorf("%s: Get err = %v, want ErrCannotOpen", name, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the value: %v", name, err)
		}
		err = s.Update(ctx, testKey, func([]byte) ([]byte, error) {
			t.Errorf("%s: fn called with a record the store could not open", name)
			return nil, nil
		})
		if !errors.Is(err, keystore.ErrCannotOpen) {
			t.Errorf("%s: Update err = %v, want ErrCannotOpen", name, err)
		}
	}
	// A store with a sealer refuses an unsealed secret planted in the table.
	plain := newStore(t, pool, &pgstore.Options{Table: table})
	other := testKey
	other.ID = "planted"
	put(t, plain, other, []byte("planted"))
	if _, err := newStore(t, pool, &pgstore.Options{Table: table, Sealer: testSealer(t, 1)}).Get(ctx, other); !errors.Is(err, keystore.ErrCannotOpen) {
		t.Errorf("sealed store reading an unsealed secret: err = %v, want ErrCannotOpen", err)
	}
}

// A sealed value is bound to its Key: copying the row to another User,
// issuer, ID or kind in the table makes it fail to open there.
func TestSealedValueCannotMove(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	ctx := context.Background()
	s := newStore(t, pool, &pgstore.Options{Table: table, Sealer: testSealer(t, 1)})
	put(t, s, testKey, []byte("alice's token"))
	sealed := rawValue(t, pool, table, testKey)
	var moved []keystore.Key
	for i := range 4 {
		k := testKey
		switch i {
		case 0:
			k.User = "mallory"
		case 1:
			k.Issuer = "https://evil.example"
		case 2:
			k.ID = "other"
		case 3:
			k.Kind = keystore.KindSession
		}
		moved = append(moved, k)
	}
	for _, k := range moved {
		_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (kind, local_user, issuer, record_id, value) VALUES ($1, $2, $3, $4, $5)`,
			string(k.Kind), k.User, k.Issuer, k.ID, sealed)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, keystore.ErrCannotOpen) {
			t.Errorf("value copied to %s: Get err = %v, want ErrCannotOpen", k, err)
		}
	}
	if got, err := s.Get(ctx, testKey); err != nil || string(got) != "alice's token" {
		t.Fatalf("original: Get = %q, %v", got, err)
	}
}

// An Update whose fn fails rolls back and returns its connection to the
// pool in a usable state, rather than making the pool reconnect.
func TestFailedUpdateKeepsItsConnection(t *testing.T) {
	pool := testPool(t)
	s := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	put(t, s, testKey, []byte("v"))
	before := pool.Stat().NewConnsCount()
	errFn := errors.New("fn failed")
	for range 20 {
		err := s.Update(context.Background(), testKey, func([]byte) ([]byte, error) { return nil, errFn })
		if !errors.Is(err, errFn) {
			t.Fatalf("Update = %v; want fn's error", err)
		}
	}
	if n := pool.Stat().NewConnsCount() - before; n > 1 {
		t.Fatalf("20 failed Updates opened %d new connections; want them to reuse one", n)
	}
}

// A role that may not create tables can use a schema that is already
// current, as when a privileged role migrated it at deployment.
func TestRestrictedRoleUsesCurrentSchema(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	schema := "poppy_restricted_" + randomHex(4)
	role := "poppy_role_" + randomHex(4)
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	opts := &pgstore.Options{Schema: schema}
	put(t, newStore(t, pool, opts), testKey, []byte("migrated by the owner"))
	for _, q := range []string{
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + schema + `.poppy_keystore TO ` + role,
		`GRANT SELECT ON ` + schema + `.poppy_keystore_version TO ` + role,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	restricted, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer restricted.Close()
	s := newStore(t, restricted, opts)
	if got, err := s.Get(ctx, testKey); err != nil || string(got) != "migrated by the owner" {
		t.Fatalf("restricted role: Get = %q, %v", got, err)
	}
	put(t, s, testKey, []byte("written by the restricted role"))
	// Without the privilege, creating a schema fails with a clear error.
	empty := newStore(t, restricted, &pgstore.Options{Schema: schema, Table: "other"})
	if _, err := empty.Get(ctx, testKey); err == nil || !strings.HasPrefix(err.Error(), "pgstore: migrate schema") {
		t.Fatalf("restricted role creating a table: err = %v, want a pgstore migrate error", err)
	}
}

// acquireWatch is a pgxpool AcquireTracer that reports, once armed, every
// pool acquire that starts.
type acquireWatch struct {
	armed   atomic.Bool
	started chan struct{}
}

func (a *acquireWatch) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if a.armed.Load() {
		select {
		case a.started <- struct{}{}:
		default:
		}
	}
	return ctx
}

func (a *acquireWatch) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

func (a *acquireWatch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (a *acquireWatch) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Until an Update's write commits, a rotated Account Token that fn obtained
// exists only in this process's memory, and a replica killed meanwhile
// loses it: the User must sign in again. So the write must wait for
// nothing but its commit; in particular not for a pooled connection, which
// at a few hundred renewals a second is the longest wait there is. With the
// pool exhausted (its one connection held elsewhere) an Update still
// writes, and deletes, its record, and asks the pool for no connection
// (PA-4.8-04: the rotated token is persisted).
func TestLockedWriteTakesNoPooledConnection(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	watch := &acquireWatch{started: make(chan struct{}, 1)}
	cfg.ConnConfig.Tracer = watch
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := testTable(t, testPool(t))
	other := newStore(t, testPool(t), &pgstore.Options{Table: table}) // another replica, to read
	s := newStore(t, pool, &pgstore.Options{Table: table})
	ctx := context.Background()
	put(t, s, testKey, []byte("token 1")) // migrates, through the pool

	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(held.Release)
	t.Cleanup(release)
	watch.armed.Store(true)
	for _, next := range [][]byte{[]byte("token 2"), nil} {
		done := make(chan error, 1)
		go func() {
			done <- s.Update(ctx, testKey, func([]byte) ([]byte, error) { return next, nil })
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Update with the pool exhausted: %v", err)
			}
		case <-watch.started:
			// PA-4.8-04
			t.Errorf("writing %q: the Update asked the pool for a connection after fn returned; a replica killed while it waits loses the rotated token", next)
			release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		got, err := other.Get(ctx, testKey)
		switch {
		case next == nil && !errors.Is(err, keystore.ErrNotFound):
			t.Fatalf("after deleting: Get = %q, %v; want ErrNotFound", got, err)
		case next != nil && (err != nil || !bytes.Equal(got, next)):
			t.Fatalf("Get = %q, %v; want %q", got, err, next)
		}
		if t.Failed() {
			return
		}
	}
	// The locks were released: another replica updates the key at once.
	put(t, other, testKey, []byte("token 3"))
}

// Stats count the writes, none of them through the pool, and the time they
// took from fn's return to the commit.
func TestStatsCountWrites(t *testing.T) {
	pool := testPool(t)
	s := newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	put(t, s, testKey, []byte("a"))
	put(t, s, testKey, []byte("a")) // unchanged: not written
	put(t, s, testKey, []byte("b"))
	if err := s.Update(context.Background(), testKey, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Updates != 4 || st.Unchanged != 1 || st.Writes != 3 || st.PoolWrites != 0 || st.WriteTime <= 0 {
		t.Errorf("Stats = %+v; want 4 Updates, 1 unchanged, 3 writes, none through the pool, and their time", st)
	}
}

// A store closed while an Update's fn runs (a replica shutting down) has
// no lock connection left to write on: what fn returned is written through
// the pool, which a store from New leaves open, rather than dropped.
func TestUpdateWritesThroughThePoolAfterClose(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool)
	s := newStore(t, pool, &pgstore.Options{Table: table})
	err := s.Update(context.Background(), testKey, func([]byte) ([]byte, error) {
		s.Close()
		return []byte("rotated"), nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	got, err := newStore(t, pool, &pgstore.Options{Table: table}).Get(context.Background(), testKey)
	if err != nil || string(got) != "rotated" {
		t.Fatalf("Get = %q, %v; the rotated token was dropped", got, err)
	}
	if st := s.Stats(); st.PoolWrites != 1 {
		t.Errorf("Stats = %+v, want 1 write through the pool", st)
	}
}
