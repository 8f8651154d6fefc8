// Package pgstore is a [keystore.Store] in a PostgreSQL database, for agent
// products that run many replicas: every replica opens the same database and
// sees the same User IDs, DPoP keys, Sessions, Account Tokens, cursors and
// pending sign-ins, so a Direct Sign-In started on one replica completes when
// the redirect reaches another.
//
// # Schema
//
// The store keeps every record in one table, poppy_keystore by default, and
// the schema version in a second table named after it (poppy_keystore_version).
// It creates or migrates both the first time it is used. Migrations are
// versioned, run once, and run under a transaction-scoped advisory lock, so
// replicas that start together wait for one another instead of racing; a
// database migrated by a newer SDK is refused rather than written with an old
// layout.
//
// # Updates across replicas
//
// [Store.Update] takes a session-level advisory lock derived from the table
// and the record's Key, reads the record, runs fn, writes what fn returned
// and releases the lock. The lock exists whether or not the row does, so two
// replicas creating the same record queue up like two replicas renewing it.
//
// No connection of the pool is held while fn runs, since fn may wait on the
// network (a token request): the locks live on a few connections of the
// store's own ([Options.LockConns], 2 by default, opened when first needed
// and outside the pool), each holding the locks of many keys at once. Taking
// a lock is a non-blocking pg_try_advisory_lock, sent together with the read
// in one round trip on the lock connection. A lock held by another process
// is waited for by trying again, from 1 ms apart up to 20 ms apart, so the
// wait costs no connection either. Updates of one key within one process
// queue in the process first ([keystore.KeyLocks]), so only one of them at a
// time polls the database.
//
// The write goes on the connection that holds the lock, in the round trip
// that releases it: the writes of every Update whose fn returned while the
// previous round trip was in flight are committed together in one
// transaction (one flush of the log), and each lock is released in the same
// round trip after the commit. Until the write commits, a rotated Account
// Token fn obtained exists only in this process's memory, and a replica
// killed meanwhile loses it (the User must sign in again), so the write
// waits for nothing but the lock connection's round trip in flight, if any,
// and its own with the commit: never for a pooled connection, which other
// work may hold. The pool serves only Get, List and
// the schema's migration, each a single statement, so the store scales with
// the number of Users, not with the pool size: pgxpool's default (4 or the
// number of CPUs) serves replicas renewing for thousands of Users
// (docs/stores.md has the figures, and the loss per kill before and after).
//
// A replica that dies releases its locks at once: PostgreSQL drops the
// session-level locks of a connection when it closes, and a killed process's
// connections close with it. If a lock connection breaks while fn runs (the
// network, or the server restarting), its locks are gone and another replica
// may take one before fn's result is written; the result is written all the
// same (on a new lock connection, or through the pool when the connection
// broke during the write itself: [Stats].PoolWrites counts those), so a
// rotated Account Token fn obtained is never dropped.
//
// An Update whose fn returns the record unchanged writes nothing.
//
// The role the store connects as needs SELECT, INSERT, UPDATE and DELETE on
// the records table and SELECT on the version table; creating or migrating
// the schema also needs CREATE on the schema, so a deployment may migrate
// once with a privileged role and run with a restricted one.
//
// # Secrets at rest
//
// Without a [keystore.Sealer] in [Options], values are stored as they are:
// anyone who can read the table, or a backup of it, can read private keys
// and tokens. With one, the values of secret kinds ([keystore.Kind.Secret])
// are sealed before they leave the process, and bound to their Key so that a
// row copied to another Key fails to open.
package pgstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyproto/poppy/keystore"
)

// DefaultTable is the table the store uses when [Options.Table] is empty.
const DefaultTable = "poppy_keystore"

// versionSuffix names the table that records the schema version.
const versionSuffix = "_version"

// maxIdentifier is PostgreSQL's limit on identifier length in bytes; longer
// names are silently truncated, which could make two tables one.
const maxIdentifier = 63

// writeTimeout bounds a write that falls back to the pool once ctx is
// done: see Update.
const writeTimeout = 30 * time.Second

// Options configure a [Store]. A nil *Options means the defaults.
type Options struct {
	// Table is the name of the table holding the records, DefaultTable if
	// empty. Names are quoted, so any name works, but it must be at most
	// 55 bytes so that the version table's name fits PostgreSQL's limit.
	Table string

	// Schema is the schema holding the tables, which must exist. If empty,
	// tables are created in the first schema of the connection's
	// search_path.
	Schema string

	// Sealer, if not nil, seals the values of secret records before they are
	// written and opens them after they are read (see [keystore.Sealer]).
	// Without one, values are stored as they are. A store with a Sealer
	// refuses to read secret records that are not sealed.
	Sealer keystore.Sealer

	// LockConns is how many connections, outside the pool, hold the
	// Updates' locks (see "Updates across replicas"). Zero means 2.
	LockConns int
}

// defaultLockConns is Options.LockConns when zero.
const defaultLockConns = 2

// Stats are counters of a Store's Updates since it was created.
type Stats struct {
	Updates   int64 // Updates whose fn ran
	Contended int64 // Updates that found the key locked by another process and waited
	Waiting   int64 // Updates waiting for another process's lock now
	Unchanged int64 // Updates whose fn returned the record unchanged: nothing written
	// LockConnsLost counts lock connections that broke or timed out,
	// releasing the locks they held.
	LockConnsLost int64
	// Writes counts the Updates that wrote or deleted their record, and
	// WriteTime is the time they took in all from fn's return to the
	// write's commit: how long a rotated Account Token fn obtained lived
	// in this process's memory only. A replica killed meanwhile loses it
	// (see docs/stores.md).
	Writes    int64
	WriteTime time.Duration
	// PoolWrites counts writes that went through the pool because the
	// lock connection broke during the write.
	PoolWrites int64
}

// Store is a [keystore.Store] in a PostgreSQL database. It is safe for
// concurrent use by many goroutines, processes and replicas.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	sealer   keystore.Sealer

	lockSpace string // names the table in advisory lock IDs
	q         queries

	migrateMu sync.Mutex
	migrated  bool // guarded by migrateMu

	local     keystore.KeyLocks // Updates of one key within this process
	lockConns []*lockConn
	stats     struct {
		updates, contended, waiting, unchanged, lost atomic.Int64
		writes, writeTime, poolWrites                atomic.Int64
	}
	// writeHook, if set (by the tests, before any Update), is told of each
	// write and its time from fn's return to the commit.
	writeHook func(keystore.Key, time.Duration)
}

// queries holds the SQL, with quoted table names, built once.
type queries struct {
	get, list, upsert, delete  string
	lock                       string // try the lock, without waiting
	unlock                     string
	versionTable               string // quoted, for to_regclass
	createVersion, readVersion string
	writeVersion               string
	migrations                 []string // migrations[i] takes the schema to version i+1
}

// Open connects to the database named by connString (a URL or key=value
// string as [pgxpool.ParseConfig] takes), creates or migrates the schema, and
// returns a store that owns the connection pool: [Store.Close] closes it.
func Open(ctx context.Context, connString string, opts *Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// The parse error quotes the connection string, which may hold a
		// password: say only that it didn't parse.
		return nil, errors.New("pgstore: cannot parse the connection string")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	s, err := New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store that uses pool, which stays the caller's to close. The
// schema is created or migrated on first use.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := checkIdentifier("table", o.Table, len(versionSuffix)); err != nil {
		return nil, err
	}
	if o.Schema != "" {
		if err := checkIdentifier("schema", o.Schema, 0); err != nil {
			return nil, err
		}
	}
	table := qualified(o.Schema, o.Table)
	version := qualified(o.Schema, o.Table+versionSuffix)
	if o.LockConns < 0 {
		return nil, errors.New("pgstore: LockConns must not be negative")
	}
	if o.LockConns == 0 {
		o.LockConns = defaultLockConns
	}
	st := &Store{
		pool:      pool,
		sealer:    o.Sealer,
		lockSpace: o.Schema + "\x00" + o.Table,
		q:         buildQueries(table, version),
	}
	for range o.LockConns {
		st.lockConns = append(st.lockConns, &lockConn{cfg: pool.Config().ConnConfig, q: &st.q, lost: &st.stats.lost})
	}
	return st, nil
}

func checkIdentifier(what, name string, reserve int) error {
	if strings.ContainsRune(name, 0) || !utf8.ValidString(name) {
		return fmt.Errorf("pgstore: %s name %q is not valid UTF-8 without NUL", what, name)
	}
	if len(name)+reserve > maxIdentifier {
		return fmt.Errorf("pgstore: %s name %q is longer than %d bytes", what, name, maxIdentifier-reserve)
	}
	return nil
}

func qualified(schema, name string) string {
	if schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

func buildQueries(table, version string) queries {
	where := ` WHERE kind = $1 AND local_user = $2 AND issuer = $3 AND record_id = $4`
	return queries{
		get:    `SELECT value FROM ` + table + where,
		lock:   `SELECT pg_try_advisory_lock($1)`,
		unlock: `SELECT pg_advisory_unlock($1)`,
		list:   `SELECT record_id FROM ` + table + ` WHERE kind = $1 AND local_user = $2 AND issuer = $3 ORDER BY record_id`,
		upsert: `INSERT INTO ` + table + ` (kind, local_user, issuer, record_id, value, updated_at)
			VALUES ($1, $2, $3, $4, $5, now())
			ON CONFLICT (kind, local_user, issuer, record_id)
			DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		delete:        `DELETE FROM ` + table + where,
		versionTable:  version,
		createVersion: `CREATE TABLE ` + version + ` (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		readVersion:   `SELECT coalesce(max(version), 0) FROM ` + version,
		writeVersion:  `INSERT INTO ` + version + ` (version) VALUES ($1)`,
		migrations: []string{
			// 1: the records. Key columns use the "C" collation so that
			// List orders IDs by their bytes, as the contract asks, and
			// the primary key serves both lookups and List.
			`CREATE TABLE ` + table + ` (
				kind       text COLLATE "C" NOT NULL,
				local_user text COLLATE "C" NOT NULL,
				issuer     text COLLATE "C" NOT NULL,
				record_id  text COLLATE "C" NOT NULL,
				value      bytea NOT NULL,
				updated_at timestamptz NOT NULL DEFAULT now(),
				PRIMARY KEY (kind, local_user, issuer, record_id)
			)`,
		},
	}
}

// Close closes the store's lock connections and, if [Open] created it, the
// connection pool, waiting for connections in use to be returned; a store
// from [New] leaves its pool open. Updates still running lose their locks,
// and write what their fn returns through the pool if it is open.
// It returns nil: the error is there so that a Store is an io.Closer.
func (s *Store) Close() error {
	for _, lc := range s.lockConns {
		lc.close()
	}
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Updates: s.stats.updates.Load(), Contended: s.stats.contended.Load(),
		Waiting: s.stats.waiting.Load(), Unchanged: s.stats.unchanged.Load(), LockConnsLost: s.stats.lost.Load(),
		Writes: s.stats.writes.Load(), WriteTime: time.Duration(s.stats.writeTime.Load()), PoolWrites: s.stats.poolWrites.Load()}
}

// SchemaVersion is the version of the schema this package creates.
const SchemaVersion = 1

// migrate brings the schema to SchemaVersion once per store. A failure is
// not remembered, so the next call tries again.
func (s *Store) migrate(ctx context.Context) error {
	s.migrateMu.Lock()
	defer s.migrateMu.Unlock()
	if s.migrated {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.migrateTx(ctx, tx) })
	if err != nil {
		return fmt.Errorf("pgstore: migrate schema: %w", err)
	}
	s.migrated = true
	return nil
}

func (s *Store) migrateTx(ctx context.Context, tx pgx.Tx) error {
	// Every replica starting at once queues here; the first migrates and
	// the others then find the schema current.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.lockID("migrate")); err != nil {
		return err
	}
	// Look before creating: a role without the CREATE privilege can use a
	// schema that is already current (CREATE TABLE IF NOT EXISTS would
	// still need the privilege).
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.q.versionTable).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.Exec(ctx, s.q.createVersion); err != nil {
			return err
		}
	}
	var v int
	if err := tx.QueryRow(ctx, s.q.readVersion).Scan(&v); err != nil {
		return err
	}
	if v > len(s.q.migrations) {
		return fmt.Errorf("schema version %d is newer than this SDK's %d; upgrade the SDK", v, len(s.q.migrations))
	}
	for i := v; i < len(s.q.migrations); i++ {
		if _, err := tx.Exec(ctx, s.q.migrations[i]); err != nil {
			return fmt.Errorf("to version %d: %w", i+1, err)
		}
		if _, err := tx.Exec(ctx, s.q.writeVersion, i+1); err != nil {
			return err
		}
	}
	return nil
}

// lockID returns the advisory lock ID for the given parts within this
// store's table: the first 64 bits of a SHA-256 over the length-prefixed
// parts. Two keys share a lock with probability 2^-64, which would only
// make them wait for each other.
func (s *Store) lockID(parts ...string) int64 {
	h := sha256.New()
	for _, p := range append([]string{"poppy keystore", s.lockSpace}, parts...) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// checkKey reports keys the table can't hold: PostgreSQL text holds neither
// NUL nor invalid UTF-8.
func checkKey(key keystore.Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	for _, f := range []string{string(key.Kind), key.User, key.Issuer, key.ID} {
		if strings.ContainsRune(f, 0) || !utf8.ValidString(f) {
			return fmt.Errorf("pgstore: key %s: fields must be valid UTF-8 without NUL", key)
		}
	}
	return nil
}

// Get returns the record for key, or an error matching [keystore.ErrNotFound].
func (s *Store) Get(ctx context.Context, key keystore.Key) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	var stored []byte
	err := s.pool.QueryRow(ctx, s.q.get, string(key.Kind), key.User, key.Issuer, key.ID).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: get %s: %w", key, keystore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: get %s: %w", key, err)
	}
	v, err := keystore.OpenValue(s.sealer, key, stored)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get: %w", err)
	}
	return v, nil
}

// Update atomically replaces the record for key with fn's result, as
// [keystore.Store] describes, under a lock that holds across every process
// and replica using the table (see "Updates across replicas").
//
// ctx bounds waiting for the lock and reading the record; fn gets no ctx of
// its own and should carry its caller's. Once fn has returned a value, the
// store writes it even if ctx is done by then: fn may have renewed a
// rotating Account Token, and dropping the rotated token because a deadline
// passed during the renewal would lose it for good (spec 4.8). Until the
// write commits, the rotated token exists only in this process's memory, so
// the write waits for nothing but its commit: it goes on the connection that
// holds the key's lock, in the round trip that releases the lock, and needs
// no pooled connection (a round trip on a lock connection is bounded by two
// minutes; a write that falls back to the pool, by 30 seconds).
func (s *Store) Update(ctx context.Context, key keystore.Key, fn func(current []byte) ([]byte, error)) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	unlockLocal, err := s.local.Lock(ctx, key) // fails at once if ctx is done
	if err != nil {
		return err
	}
	defer unlockLocal()

	id := s.lockID(string(key.Kind), key.User, key.Issuer, key.ID)
	params := keyParams(key)
	lc := s.lockConns[uint64(id)%uint64(len(s.lockConns))]
	stored, existed, err := s.lock(ctx, lc, id, params)
	if err != nil {
		return fmt.Errorf("pgstore: update %s: lock and read: %w", key, err)
	}
	locked := true
	defer func() {
		if locked {
			lc.unlock(id)
		}
	}()
	var current []byte
	if existed {
		if current, err = keystore.OpenValue(s.sealer, key, stored); err != nil {
			return fmt.Errorf("pgstore: update: %w", err)
		}
	}

	s.stats.updates.Add(1)
	next, err := fn(current)
	if err != nil {
		return err // unchanged, as the contract says
	}
	if next == nil && !existed || next != nil && existed && bytes.Equal(next, current) {
		s.stats.unchanged.Add(1)
		return nil
	}
	var sealed []byte
	if next != nil {
		if sealed, err = keystore.SealValue(s.sealer, key, next); err != nil {
			return fmt.Errorf("pgstore: update %s: seal: %w", key, err)
		}
		if sealed == nil {
			sealed = []byte{} // an empty record, not NULL
		}
	}
	t0 := time.Now()
	locked = false // the write releases the lock, or its connection is gone
	err = lc.writeUnlock(id, params, sealed, next == nil)
	if lost := (*connLostError)(nil); errors.As(err, &lost) {
		// The lock connection broke during the write: its locks went with
		// it, and the write may or may not have committed. Write through
		// the pool all the same (see "Updates across replicas").
		s.stats.poolWrites.Add(1)
		err = s.poolWrite(ctx, key, sealed, next == nil)
	}
	if err != nil {
		return fmt.Errorf("pgstore: update %s: write: %w", key, err)
	}
	s.wrote(key, time.Since(t0))
	return nil
}

// keyParams returns key's fields as the text parameters of the statements
// that name a record.
func keyParams(key keystore.Key) [][]byte {
	return [][]byte{[]byte(key.Kind), []byte(key.User), []byte(key.Issuer), []byte(key.ID)}
}

// poolWrite writes (or, with del, deletes) key's record through a pooled
// connection, within writeTimeout even if ctx is done.
func (s *Store) poolWrite(ctx context.Context, key keystore.Key, sealed []byte, del bool) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	args := []any{string(key.Kind), key.User, key.Issuer, key.ID}
	var err error
	if del {
		_, err = s.pool.Exec(wctx, s.q.delete, args...)
	} else {
		_, err = s.pool.Exec(wctx, s.q.upsert, append(args, sealed)...)
	}
	return err
}

// wrote counts a write that took d from fn's return to its commit.
func (s *Store) wrote(key keystore.Key, d time.Duration) {
	s.stats.writes.Add(1)
	s.stats.writeTime.Add(int64(d))
	if s.writeHook != nil {
		s.writeHook(key, d)
	}
}

// Polling for a lock another process holds: the first retry after
// minPoll, each later one twice as late, at most maxPoll apart, each wait
// drawn from [d/2, d) so that replicas don't retry in step.
const (
	minPoll = time.Millisecond
	maxPoll = 20 * time.Millisecond
)

// lock takes the advisory lock id on lc and reads the record named by
// params, waiting for another process to release the lock until ctx is
// done.
func (s *Store) lock(ctx context.Context, lc *lockConn, id int64, params [][]byte) (stored []byte, existed bool, err error) {
	wait := minPoll
	waiting := false
	defer func() {
		if waiting {
			s.stats.waiting.Add(-1)
		}
	}()
	for failures := 0; ; {
		got, v, err := lc.tryLockGet(id, params)
		if err != nil && got {
			lc.unlock(id) // locked, but the read failed
		}
		if err != nil {
			// A broken lock connection reconnects on the next try.
			if failures++; failures == 2 {
				return nil, false, err
			}
			continue
		}
		if got {
			return v, v != nil, nil
		}
		if !waiting {
			waiting = true
			s.stats.contended.Add(1)
			s.stats.waiting.Add(1)
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxPoll)
	}
}

// lockTimeout bounds each round trip on a lock connection. It is not the
// caller's ctx: a statement abandoned half-way closes the connection, which
// releases every lock it holds, other Updates' too; so it is long, for a
// server that stopped answering rather than one that is slow.
const lockTimeout = 2 * time.Minute

// maxLockBatch bounds the requests sent in one round trip, so that one
// batch stays short on a loaded server.
const maxLockBatch = 256

// lockConn is a connection of the store's own holding session-level
// advisory locks for many Updates at once, and writing their records.
// Requests queue up while a round trip is in flight and go together in the
// next one (a pipeline), so the connection serves as many Updates as the
// server can run, not one per round trip.
//
// In a round trip, each lock-and-read and each release is a segment of its
// own (its statements and a Sync), so that one refused statement fails
// only its own request. The writes come last, all in one transaction:
//
//	BEGIN; write 1; …; write n; COMMIT; unlock 1; …; unlock n; Sync
//
// so that they share one commit (one flush of the log, however many
// Updates wrote) and each lock is released only once its write is durable:
// a replica that takes the lock next reads what was written. If a write is
// refused, the server skips the rest of the segment: nothing is committed
// and every lock is still held; the transaction is rolled back and each
// write is tried again alone, then its lock released, so that one refused
// write fails only its own Update.
type lockConn struct {
	cfg     *pgx.ConnConfig
	q       *queries
	lost    *atomic.Int64
	mu      sync.Mutex
	queue   []*lockOp
	running bool      // a goroutine sends the queue
	conn    *pgx.Conn // nil until first used, or after it broke; used by the sender only
	closed  bool
}

// The statements of a lock connection, prepared once per connection.
const (
	stmtTryLock = "poppy_try_lock"
	stmtGet     = "poppy_get"
	stmtUnlock  = "poppy_unlock"
	stmtUpsert  = "poppy_upsert"
	stmtDelete  = "poppy_delete"
	stmtBegin   = "poppy_begin"
	stmtCommit  = "poppy_commit"
)

// Parameter and result formats of the prepared statements: keys and lock
// IDs in text, values and booleans in binary.
var (
	binaryResult  = []int16{1}
	upsertFormats = []int16{0, 0, 0, 0, 1}
)

// opKind is what a lockOp asks.
type opKind uint8

const (
	opLock   opKind = iota // try the lock and read the record
	opUnlock               // release the lock
	opWrite                // write (or delete) the record, commit, release the lock
)

// lockOp is one request on a lock connection.
type lockOp struct {
	kind   opKind
	id     int64
	params [][]byte // the record's key (opLock, opWrite)
	value  []byte   // opWrite: the value to store; opLock: the value read, nil if none
	del    bool     // opWrite: delete the record

	got  bool // opLock: the lock was taken
	err  error
	lost bool // the connection broke before the answer was read
	done chan struct{}
	// finished is set when done is closed; the sender alone reads and
	// writes it.
	finished bool
}

// finish answers op, once.
func (op *lockOp) finish() {
	if !op.finished {
		op.finished = true
		close(op.done)
	}
}

// connLostError is a write's error when the lock connection broke before
// the write's answer: whether it committed is not known, and the lock is
// gone with the connection.
type connLostError struct{ err error }

func (e *connLostError) Error() string { return "lock connection lost: " + e.err.Error() }
func (e *connLostError) Unwrap() error { return e.err }

// submit queues op and waits for its answer.
func (l *lockConn) submit(op *lockOp) {
	op.done = make(chan struct{})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		// As if the connection broke: a write goes through the pool.
		op.err, op.lost = errors.New("pgstore: store closed"), true
		return
	}
	l.queue = append(l.queue, op)
	if !l.running {
		l.running = true
		go l.send()
	}
	l.mu.Unlock()
	<-op.done
}

// send sends the queue, one batch per round trip, until it is empty.
func (l *lockConn) send() {
	for {
		l.mu.Lock()
		ops := l.queue
		if len(ops) > maxLockBatch {
			ops = slices.Clone(ops[:maxLockBatch])
			l.queue = l.queue[maxLockBatch:]
		} else {
			l.queue = nil
		}
		if len(ops) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.run(ops)
		for _, op := range ops {
			op.finish()
		}
	}
}

// connect opens the connection and prepares its statements.
func (l *lockConn) connect(ctx context.Context) error {
	c, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return err
	}
	for _, st := range []struct {
		name, sql string
		oids      []uint32
	}{
		{stmtTryLock, l.q.lock, []uint32{pgtype.Int8OID}},
		{stmtUnlock, l.q.unlock, []uint32{pgtype.Int8OID}},
		{stmtGet, l.q.get, []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID}},
		{stmtDelete, l.q.delete, []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID}},
		{stmtUpsert, l.q.upsert, []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID}},
		{stmtBegin, "BEGIN", nil},
		{stmtCommit, "COMMIT", nil},
	} {
		if _, err := c.PgConn().Prepare(ctx, st.name, st.sql, st.oids); err != nil {
			c.Close(ctx)
			return err
		}
	}
	l.conn = c
	return nil
}

// run sends ops in one round trip on the connection, connecting first if
// need be, and answers each op as soon as its results are read. An error
// that is not the server's answer closes the connection (its locks go with
// it); the next batch reconnects.
func (l *lockConn) run(ops []*lockOp) {
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	fail := func(err error) {
		for _, op := range ops {
			if !op.finished {
				op.err, op.lost = err, true
				op.finish()
			}
		}
	}
	if l.conn != nil && l.conn.IsClosed() {
		l.conn = nil
	}
	if l.conn == nil {
		if err := l.connect(ctx); err != nil {
			fail(err)
			return
		}
	}
	var reads, writes []*lockOp
	for _, op := range ops {
		if op.kind == opWrite {
			writes = append(writes, op)
		} else {
			reads = append(reads, op)
		}
	}
	p := l.conn.PgConn().StartPipeline(ctx)
	for _, op := range reads {
		id := [][]byte{strconv.AppendInt(nil, op.id, 10)}
		if op.kind == opUnlock {
			p.SendQueryPrepared(stmtUnlock, id, nil, nil)
		} else {
			// The read is a statement of its own, so its snapshot is
			// taken once the lock is held and sees what the previous
			// holder wrote.
			p.SendQueryPrepared(stmtTryLock, id, nil, binaryResult)
			p.SendQueryPrepared(stmtGet, op.params, nil, binaryResult)
		}
		p.SendPipelineSync()
	}
	if len(writes) > 0 {
		p.SendQueryPrepared(stmtBegin, nil, nil, nil)
		for _, w := range writes {
			if w.del {
				p.SendQueryPrepared(stmtDelete, w.params, nil, nil)
			} else {
				p.SendQueryPrepared(stmtUpsert, append(slices.Clip(w.params), w.value), upsertFormats, nil)
			}
		}
		p.SendQueryPrepared(stmtCommit, nil, nil, nil)
		for _, w := range writes {
			p.SendQueryPrepared(stmtUnlock, [][]byte{strconv.AppendInt(nil, w.id, 10)}, nil, nil)
		}
		p.SendPipelineSync()
	}
	broken := func(err error) {
		p.Close()
		fail(err)
		l.drop()
	}
	if err := p.Flush(); err != nil {
		broken(err)
		return
	}
	drop := false // a lock may still be held that no Update will release
	for _, op := range reads {
		n := 1
		if op.kind == opLock {
			n = 2
		}
		refused, err := readSegment(p, n, func(i int, rr *pgconn.ResultReader) error {
			switch {
			case op.kind == opLock && i == 0:
				if rr.NextRow() {
					v := rr.Values()
					op.got = len(v) == 1 && len(v[0]) == 1 && v[0][0] == 1
				}
			case op.kind == opLock:
				if rr.NextRow() {
					if op.value = bytes.Clone(rr.Values()[0]); op.value == nil {
						op.value = []byte{} // an empty record
					}
				}
			}
			_, err := rr.Close()
			return err
		})
		if err != nil {
			broken(err)
			return
		}
		if op.err = refused; refused != nil && op.kind == opUnlock {
			drop = true // closing the connection releases its locks
		}
		op.finish()
	}
	var retry []*lockOp // writes to try again alone
	if len(writes) > 0 {
		n := len(writes)
		committed := false
		refused, err := readSegment(p, 2*n+2, func(i int, rr *pgconn.ResultReader) error {
			tag, err := rr.Close()
			if err == nil && i == n+1 {
				if tag.String() != "COMMIT" {
					return fmt.Errorf("pgstore: writes not committed (%s)", tag)
				}
				committed = true
			}
			return err
		})
		switch {
		case err != nil && committed:
			// Written; the connection broke releasing the locks, which
			// it releases by breaking.
			for _, w := range writes {
				w.finish()
			}
			broken(err)
			return
		case err != nil:
			broken(err)
			return
		case refused != nil && committed:
			drop = true // an unlock was refused after the commit
		case refused != nil:
			retry = writes
		}
		if retry == nil {
			for _, w := range writes {
				w.finish()
			}
		}
	}
	if err := p.Close(); err != nil {
		fail(err)
		l.drop()
		return
	}
	if len(retry) > 0 {
		if err := l.retryWrites(ctx, retry); err != nil {
			fail(err)
			l.drop()
			return
		}
	}
	if drop {
		l.drop()
	}
}

// retryWrites rolls back the transaction of a refused group of writes and
// tries each write again in a transaction of its own, then releases its
// lock. It returns an error only when the connection broke.
func (l *lockConn) retryWrites(ctx context.Context, writes []*lockOp) error {
	pc := l.conn.PgConn()
	if pc.TxStatus() != 'I' {
		if err := pc.Exec(ctx, "ROLLBACK").Close(); err != nil {
			return err
		}
	}
	var pgErr *pgconn.PgError
	for _, w := range writes {
		if w.del {
			_, w.err = pc.ExecPrepared(ctx, stmtDelete, w.params, nil, nil).Close()
		} else {
			_, w.err = pc.ExecPrepared(ctx, stmtUpsert, append(slices.Clip(w.params), w.value), upsertFormats, nil).Close()
		}
		if w.err != nil && !errors.As(w.err, &pgErr) {
			return w.err
		}
		if _, err := pc.ExecPrepared(ctx, stmtUnlock, [][]byte{strconv.AppendInt(nil, w.id, 10)}, nil, nil).Close(); err != nil {
			if w.err == nil {
				w.finish()
			}
			return err // dropping the connection releases the lock
		}
		w.finish()
	}
	return nil
}

// readSegment reads the results of the n statements of one segment of p,
// calling each with each statement's result in turn, and the Sync that
// ends the segment. A statement the server refused ends the segment (the
// server skips the rest): its error is returned as refused. Any other
// error (the connection broke, or an answer out of turn) is returned as
// err, and the connection can't be trusted any more.
func readSegment(p *pgconn.Pipeline, n int, each func(i int, rr *pgconn.ResultReader) error) (refused, err error) {
	var pgErr *pgconn.PgError
	for i := 0; i < n && refused == nil; i++ {
		res, err := p.GetResults()
		if err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			if !ok {
				return nil, fmt.Errorf("pgstore: lock connection: got %T, want a statement's result", res)
			}
			err = each(i, rr)
		}
		if errors.As(err, &pgErr) {
			refused = err
		} else if err != nil {
			return nil, err
		}
	}
	for {
		res, err := p.GetResults()
		if errors.As(err, &pgErr) {
			if refused == nil {
				refused = err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if _, ok := res.(*pgconn.PipelineSync); !ok {
			return nil, fmt.Errorf("pgstore: lock connection: got %T, want the end of a segment", res)
		}
		return refused, nil
	}
}

// drop closes a connection that can't be trusted; its locks go with it.
func (l *lockConn) drop() {
	l.conn.Close(context.Background())
	l.conn = nil
	l.lost.Add(1)
}

// tryLockGet tries the lock id and reads the record named by params, in
// one round trip. The value is nil when there is no record.
func (l *lockConn) tryLockGet(id int64, params [][]byte) (got bool, value []byte, err error) {
	op := &lockOp{kind: opLock, id: id, params: params}
	l.submit(op)
	return op.got, op.value, op.err
}

// unlock releases the lock id. If the connection broke meanwhile, the lock
// is gone already.
func (l *lockConn) unlock(id int64) {
	l.submit(&lockOp{kind: opUnlock, id: id})
}

// writeUnlock writes value as the record named by params (or, with del,
// deletes it), commits, and releases the lock id, in one round trip on the
// connection that holds the lock. On return the lock is released, or gone
// with the connection; the error is a *connLostError when the connection
// broke before the commit's answer.
func (l *lockConn) writeUnlock(id int64, params [][]byte, value []byte, del bool) error {
	op := &lockOp{kind: opWrite, id: id, params: params, value: value, del: del}
	l.submit(op)
	if op.lost {
		return &connLostError{op.err}
	}
	return op.err
}

// close closes the connection once no batch is in flight; later requests
// fail.
func (l *lockConn) close() {
	l.mu.Lock()
	l.closed = true
	for l.running {
		l.mu.Unlock()
		time.Sleep(time.Millisecond)
		l.mu.Lock()
	}
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		c.Close(context.Background())
	}
}

// List returns the keys of every record of kind for user at issuer, in
// ascending order of ID.
func (s *Store) List(ctx context.Context, kind keystore.Kind, user, issuer string) ([]keystore.Key, error) {
	probe := keystore.Key{Kind: kind, User: user, Issuer: issuer}
	if err := checkKey(probe); err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.list, string(kind), user, issuer)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list %s: %w", probe, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: list %s: %w", probe, err)
	}
	keys := make([]keystore.Key, len(ids))
	for i, id := range ids {
		keys[i] = keystore.Key{Kind: kind, User: user, Issuer: issuer, ID: id}
	}
	return keys, nil
}

var _ keystore.Store = (*Store)(nil)
