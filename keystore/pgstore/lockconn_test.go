package pgstore

// Tests of the lock connection's round trips from inside the package,
// where a test can put several Updates' writes in one round trip for sure.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/keystore"
)

// internalStore returns a store with one lock connection on a table of the
// test's own, and its pool.
func internalStore(t *testing.T) (*Store, *pgxpool.Pool, string) {
	t.Helper()
	u := os.Getenv("POPPY_TEST_POSTGRES_URL")
	if u == "" {
		realtest.Missing(t, "PostgreSQL", "POPPY_TEST_POSTGRES_URL is not set (source .ci/postgres.sh to start a server)")
	}
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := make([]byte, 6)
	rand.Read(b)
	table := "poppy_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		for _, q := range []string{`DROP TABLE IF EXISTS ` + table, `DROP TABLE IF EXISTS ` + table + `_version`,
			`DROP FUNCTION IF EXISTS ` + table + `_refuse`} {
			if _, err := pool.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	s, err := New(pool, &Options{Table: table, LockConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, pool, table
}

// idle waits until lc's sender is done with its connection (it answers a
// request before it has read the rest of the round trip), so that the test
// may use it.
func idle(lc *lockConn) {
	for {
		lc.mu.Lock()
		running := lc.running
		lc.mu.Unlock()
		if !running {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func recordKey(id string) keystore.Key {
	return keystore.Key{Kind: keystore.KindAccountToken, User: "alice", Issuer: "https://auth.example.com", ID: id}
}

// advisoryLocks counts the advisory locks the backend pid holds.
func advisoryLocks(t *testing.T, pool *pgxpool.Pool, pid uint32) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1`, int64(pid)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Writes that share a round trip share one commit, and a write the server
// refuses fails its own Update only: the others commit, its record is left
// as it was, every lock is released, and the connection is kept.
func TestGroupedWriteRefusedFailsOnlyItself(t *testing.T) {
	s, pool, table := internalStore(t)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE FUNCTION ` + table + `_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.record_id = 'refused' THEN RAISE EXCEPTION 'refused by the test'; END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION ` + table + `_refuse()`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	lc := s.lockConns[0]
	var ops []*lockOp
	for _, id := range []string{"first", "refused", "last"} {
		k := recordKey(id)
		lid := s.lockID(string(k.Kind), k.User, k.Issuer, k.ID)
		got, v, err := lc.tryLockGet(lid, keyParams(k))
		if err != nil || !got || v != nil {
			t.Fatalf("locking %s: got %v, value %q, %v", id, got, v, err)
		}
		ops = append(ops, &lockOp{kind: opWrite, id: lid, params: keyParams(k), value: []byte("value of " + id), done: make(chan struct{})})
	}
	idle(lc)
	pid := lc.conn.PgConn().PID()
	if n := advisoryLocks(t, pool, pid); n != 3 {
		t.Fatalf("%d advisory locks held, want 3", n)
	}
	lc.run(ops) // the three writes in one round trip, as the sender sends them
	var pgErr *pgconn.PgError
	if !errors.As(ops[1].err, &pgErr) || pgErr.Message != "refused by the test" || ops[1].lost {
		t.Errorf("the refused write: err %v, lost %v; want the server's error", ops[1].err, ops[1].lost)
	}
	for _, i := range []int{0, 2} {
		if ops[i].err != nil || ops[i].lost {
			t.Errorf("write %d beside the refused one: err %v, lost %v; want it committed", i, ops[i].err, ops[i].lost)
		}
	}
	for _, op := range ops {
		if !op.finished {
			t.Errorf("op %d not answered", op.id)
		}
	}
	for id, want := range map[string]string{"first": "value of first", "last": "value of last", "refused": ""} {
		got, err := s.Get(ctx, recordKey(id))
		if want == "" && !errors.Is(err, keystore.ErrNotFound) || want != "" && (err != nil || string(got) != want) {
			t.Errorf("%s: Get = %q, %v; want %q", id, got, err, want)
		}
	}
	idle(lc)
	if lc.conn == nil || lc.conn.PgConn().PID() != pid || s.Stats().LockConnsLost != 0 {
		t.Fatalf("the lock connection was dropped for a refused write")
	}
	if n := advisoryLocks(t, pool, pid); n != 0 {
		t.Errorf("%d advisory locks still held after the writes, want 0", n)
	}
	if st := lc.conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("lock connection left in transaction status %q, want idle", st)
	}
	// And the connection goes on serving Updates.
	if err := s.Update(ctx, recordKey("first"), func([]byte) ([]byte, error) { return []byte("again"), nil }); err != nil {
		t.Fatal(err)
	}
}

// A lock connection that breaks while fn runs takes the key's lock with
// it; what fn returned is written all the same (a rotated Account Token
// must not be dropped), and the store goes on with a new connection.
func TestWriteAfterLockConnectionBroke(t *testing.T) {
	s, pool, _ := internalStore(t)
	ctx := context.Background()
	k := recordKey("main")
	err := s.Update(ctx, k, func([]byte) ([]byte, error) {
		idle(s.lockConns[0])
		pid := s.lockConns[0].conn.PgConn().PID()
		if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
			t.Fatal(err)
		}
		return []byte("rotated"), nil
	})
	if err != nil {
		t.Fatalf("Update after its lock connection broke: %v", err)
	}
	got, err := s.Get(ctx, k)
	if err != nil || string(got) != "rotated" {
		t.Fatalf("Get = %q, %v; the rotated token was dropped", got, err)
	}
	if st := s.Stats(); st.Writes != 1 {
		t.Errorf("Stats = %+v, want 1 write", st)
	}
	if err := s.Update(ctx, k, func([]byte) ([]byte, error) { return []byte("next"), nil }); err != nil {
		t.Fatal(err)
	}
}
