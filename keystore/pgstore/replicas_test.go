package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/pgstore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

// replicaStore is a replica's store with the figures of its pool and of
// its Account Token writes. With POPPY_PGSTORE_TEST_BASELINE=xact its
// Updates are the first design's (XactStore), with =pool the one before
// writes went on the lock connection (PoolWriteStore), for the figures
// before.
type replicaStore struct {
	keystore.Store
	pg     *pgstore.Store
	pool   *pgxpool.Pool
	acq    *acquireTimes
	writes *acquireTimes // Account Token writes, fn's return to commit
	from   pgxpool.Stat  // at ResetLoadStats
	base   pgstore.Stats
	commit atomic.Pointer[func(keystore.Key)] // OnCommit's
}

// OnCommit has f told of each write as it commits (testenv counts from it
// the rotations a killed replica had not yet written).
func (r *replicaStore) OnCommit(f func(keystore.Key)) { r.commit.Store(&f) }

// acquireTimes records how long each pool acquire took: a pgxpool
// AcquireTracer. It records the writes' times too.
type acquireTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

type acquireStart struct{}

func (a *acquireTimes) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return context.WithValue(ctx, acquireStart{}, time.Now())
}

func (a *acquireTimes) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	t0, _ := ctx.Value(acquireStart{}).(time.Time)
	a.mu.Lock()
	a.d = append(a.d, time.Since(t0))
	a.mu.Unlock()
}

func (a *acquireTimes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (a *acquireTimes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (a *acquireTimes) add(d time.Duration) {
	a.mu.Lock()
	a.d = append(a.d, d)
	a.mu.Unlock()
}

// sum returns how many times there are and their sum.
func (a *acquireTimes) sum() (n int64, total time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range a.d {
		total += d
	}
	return int64(len(a.d)), total
}

func (a *acquireTimes) reset() {
	a.mu.Lock()
	a.d = nil
	a.mu.Unlock()
}

// quantile returns the q-quantile of the times so far.
func (a *acquireTimes) quantile(q float64) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.d) == 0 {
		return 0
	}
	slices.Sort(a.d)
	return a.d[min(len(a.d)-1, int(q*float64(len(a.d))))]
}

// ResetLoadStats starts the figures afresh: the load run calls it when the
// steady run starts.
func (r *replicaStore) ResetLoadStats() {
	r.from = *r.pool.Stat()
	r.base = r.pg.Stats()
	r.acq.reset()
	r.writes.reset()
}

// LoadStats reports, since ResetLoadStats, the pool's acquires (how many
// had to wait for a connection, for how long in all, and the 50th and 99th
// percentile of every acquire's time; testenv takes the largest of each
// replica's percentiles), the store's lock figures, and the Account Token
// writes (how many, their time in all, and its percentiles), each timed
// from fn's return to the commit.
func (r *replicaStore) LoadStats() map[string]int64 {
	ps := r.pool.Stat()
	ss := r.pg.Stats()
	n, total := r.writes.sum()
	return map[string]int64{
		"at_writes": n, "at_write_us": total.Microseconds(),
		"at_write_p50_us": r.writes.quantile(0.50).Microseconds(), "at_write_p99_us": r.writes.quantile(0.99).Microseconds(),
		"pool_writes": ss.PoolWrites - r.base.PoolWrites,
		"acquires":    ps.AcquireCount() - r.from.AcquireCount(), "acquires_waited": ps.EmptyAcquireCount() - r.from.EmptyAcquireCount(),
		"acquire_wait_us": (ps.EmptyAcquireWaitTime() - r.from.EmptyAcquireWaitTime()).Microseconds(),
		"acquire_p50_us":  r.acq.quantile(0.50).Microseconds(), "acquire_p99_us": r.acq.quantile(0.99).Microseconds(),
		"pool_size": int64(ps.MaxConns()),
		"updates":   ss.Updates - r.base.Updates, "contended": ss.Contended - r.base.Contended,
		"unchanged": ss.Unchanged - r.base.Unchanged, "lock_conns_lost": ss.LockConnsLost - r.base.LockConnsLost,
	}
}

func (r *replicaStore) Close() error {
	r.pg.Close()
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
	acq := &acquireTimes{}
	cfg.ConnConfig.Tracer = acq
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	lockConns, _ := strconv.Atoi(os.Getenv("POPPY_PGSTORE_TEST_LOCKCONNS"))
	s, err := pgstore.New(pool, &pgstore.Options{Table: table, LockConns: lockConns})
	if err != nil {
		pool.Close()
		return nil, err
	}
	r := &replicaStore{Store: s, pg: s, pool: pool, acq: acq, writes: &acquireTimes{}}
	pgstore.SetWriteHook(s, func(k keystore.Key, d time.Duration) {
		if f := r.commit.Load(); f != nil {
			(*f)(k)
		}
		if k.Kind == keystore.KindAccountToken {
			r.writes.add(d)
		}
	})
	switch b := os.Getenv("POPPY_PGSTORE_TEST_BASELINE"); b {
	case "":
	case "xact":
		r.Store = pgstore.XactStore{Store: s}
	case "pool":
		r.Store = pgstore.PoolWriteStore{Store: s}
	default:
		s.Close()
		pool.Close()
		return nil, fmt.Errorf("POPPY_PGSTORE_TEST_BASELINE=%q: want xact, pool or nothing", b)
	}
	return r, nil
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
// replicas, no kills, for POPPY_TEST_REPLICA_LOAD_SECONDS (default 20)
// seconds, Session Tokens of POPPY_TEST_REPLICA_LOAD_TTL (default 4 s),
// each replica calling for each User every POPPY_TEST_REPLICA_LOAD_EVERY
// (default 4 s): at random around it, or, with
// POPPY_TEST_REPLICA_LOAD_ALIGNED=1, all replicas at the same moments. It
// logs refreshes per User per lifetime and the pools' waits, and fails
// above 1.05 refreshes per lifetime. POPPY_TEST_REPLICA_LOAD_KILLS=1 then
// crashes and kills replicas as TestReplicas does, running
// POPPY_TEST_REPLICA_LOAD_AFTER (default 3 s) after them; without
// POPPY_TEST_REPLICA_NOCHECK every User is then checked.
// POPPY_TEST_REPLICA_LOAD_KILL9=N instead kills replica 1 with SIGKILL N
// times at random moments, POPPY_TEST_REPLICA_LOAD_KILL_EVERY apart
// (default two token lifetimes and a call interval), and logs the
// rotations each kill lost; POPPY_TEST_REPLICA_LOAD_GRACE gives the fake
// Company a rotation grace; POPPY_PGSTORE_TEST_POOL sets the pool size,
// POPPY_PGSTORE_TEST_LOCKCONNS the lock connections (Options.LockConns).
// POPPY_PGSTORE_TEST_BASELINE=xact runs the store's first Update
// (XactStore), =pool the one that wrote through the pool (PoolWriteStore),
// for the figures before:
//
//	source .ci/postgres.sh
//	POPPY_TEST_REPLICA_LOAD=10000 POPPY_TEST_REPLICA_LOAD_TTL=60s POPPY_TEST_REPLICA_LOAD_EVERY=60s \
//	POPPY_TEST_REPLICA_LOAD_SECONDS=90 POPPY_TEST_REPLICA_LOAD_ALIGNED=1 POPPY_TEST_REPLICA_NOCHECK=1 \
//	go test -run TestReplicaLoad -v -timeout 20m ./keystore/pgstore/
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
	ttl, err := time.ParseDuration(os.Getenv("POPPY_TEST_REPLICA_LOAD_TTL"))
	if err != nil {
		ttl = 4 * time.Second
	}
	// With kills, the run after them should outlast a token lifetime, so
	// that every User renews after them and a lost rotation shows.
	after, _ := time.ParseDuration(os.Getenv("POPPY_TEST_REPLICA_LOAD_AFTER"))
	kill9, _ := strconv.Atoi(os.Getenv("POPPY_TEST_REPLICA_LOAD_KILL9"))
	killEvery, _ := time.ParseDuration(os.Getenv("POPPY_TEST_REPLICA_LOAD_KILL_EVERY"))
	grace, _ := time.ParseDuration(os.Getenv("POPPY_TEST_REPLICA_LOAD_GRACE"))
	s, env := sharedStore(t, false)
	testenv.ReplicaRun(t, s, env[envTable], &testenv.ReplicaOptions{Users: users, TokenTTL: ttl,
		Kills: os.Getenv("POPPY_TEST_REPLICA_LOAD_KILLS") != "", After: after,
		Kill9: kill9, Kill9Every: killEvery, RotationGrace: grace,
		CallEvery: every, Steady: time.Duration(secs) * time.Second, Aligned: os.Getenv("POPPY_TEST_REPLICA_LOAD_ALIGNED") != ""})
}

// The baseline of the load run is a correct store, not a straw man: it
// passes the contract suite.
func TestXactStoreContract(t *testing.T) {
	s, _ := sharedStore(t, false)
	storetest.Run(t, func(*testing.T) keystore.Store { return pgstore.XactStore{Store: s} })
}
