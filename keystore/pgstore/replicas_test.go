package pgstore_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/pgstore"
)

// replicaStore is a replica's store with the figures of its pool.
type replicaStore struct {
	*pgstore.Store
	pool *pgxpool.Pool
}

// LoadStats reports the pool's acquires (and how many had to wait for a
// connection, and for how long in all) and the store's lock figures.
func (r *replicaStore) LoadStats() map[string]int64 {
	ps := r.pool.Stat()
	ss := r.Stats()
	return map[string]int64{
		"acquires": ps.AcquireCount(), "acquires_waited": ps.EmptyAcquireCount(),
		"acquire_wait_us": ps.EmptyAcquireWaitTime().Microseconds(),
		"updates":         ss.Updates, "contended": ss.Contended, "unchanged": ss.Unchanged, "lock_conns_lost": ss.LockConnsLost,
	}
}

func (r *replicaStore) Close() error {
	r.Store.Close()
	r.pool.Close()
	return nil
}

// openReplicaStore opens, in a replica of testenv.ReplicaRun, the table
// named by spec with the default pool size (POPPY_PGSTORE_TEST_POOL
// overrides it).
func openReplicaStore(table string) (keystore.Store, error) {
	cfg, err := pgxpool.ParseConfig(os.Getenv(urlEnv))
	if err != nil {
		return nil, err
	}
	if n, err := strconv.Atoi(os.Getenv("POPPY_PGSTORE_TEST_POOL")); err == nil && n > 0 {
		cfg.MaxConns = int32(n)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	s, err := pgstore.New(pool, &pgstore.Options{Table: table})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &replicaStore{Store: s, pool: pool}, nil
}

// Three OS processes on one PostgreSQL store serve 20 signed-in Users whose
// Account Tokens rotate on every use, with Session Tokens of 2 s; one
// replica crashes between the Company rotating a token and the store
// saving it, another is killed at random. No User ends stuck, the lost
// rotation ends in sign_in_required and a working signed-out Session, and
// before the kills the replicas refresh once per lifetime (PA-4.8-04,
// PA-4.8-05, PA-4.8-06).
func TestReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process run of about 10 s")
	}
	s, env := sharedStore(t, false)
	testenv.ReplicaRun(t, s, env[envTable], &testenv.ReplicaOptions{Kills: true})
}

// TestReplicaLoad is the load run, skipped unless POPPY_TEST_REPLICA_LOAD
// names the number of Users (10000 for the figures in docs/stores.md): 3
// replicas with Session Tokens of 4 s, no kills, for
// POPPY_TEST_REPLICA_LOAD_SECONDS (default 20) seconds, each replica calling
// for each User every POPPY_TEST_REPLICA_LOAD_EVERY or so (default 4 s). It
// logs refreshes
// per User per lifetime and the pools' waits:
//
//	source .ci/postgres.sh
//	POPPY_TEST_REPLICA_LOAD=10000 go test -run TestReplicaLoad -v ./keystore/pgstore/
func TestReplicaLoad(t *testing.T) {
	users, _ := strconv.Atoi(os.Getenv("POPPY_TEST_REPLICA_LOAD"))
	if users <= 0 {
		t.Skip("set POPPY_TEST_REPLICA_LOAD to the number of Users to run the load test")
	}
	secs, _ := strconv.Atoi(os.Getenv("POPPY_TEST_REPLICA_LOAD_SECONDS"))
	if secs <= 0 {
		secs = 20
	}
	every, err := time.ParseDuration(os.Getenv("POPPY_TEST_REPLICA_LOAD_EVERY"))
	if err != nil {
		every = 4 * time.Second
	}
	s, env := sharedStore(t, false)
	testenv.ReplicaRun(t, s, env[envTable], &testenv.ReplicaOptions{Users: users, TokenTTL: 4 * time.Second,
		CallEvery: every, Steady: time.Duration(secs) * time.Second})
}
