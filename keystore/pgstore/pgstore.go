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
// in one round trip on the lock connection; the write is one statement on a
// pooled connection; the release is one more round trip. A lock held by
// another process is waited for by trying again, from 1 ms apart up to 20 ms
// apart, so the wait costs no connection either. Updates of one key within
// one process queue in the process first ([keystore.KeyLocks]), so only one
// of them at a time polls the database. The store thus scales with the
// number of Users, not with the pool size: the pool need only be as large as
// the number of reads and writes in flight at once, each a single statement
// (pgxpool's default is 4 or the number of CPUs; with durable commits each
// write holds its connection for an fsync, so a replica renewing for many
// Users at once gains from pool_max_conns of 8 to 16: with 10,000 Users on
// 3 replicas renewing about 250 Session Tokens a second, 6.8% of acquires
// waited with 4 connections and 0.4% with 16, against 99.9% when a pooled
// connection held the lock through the token request; docs/stores.md has
// the figures).
//
// A replica that dies releases its locks at once: PostgreSQL drops the
// session-level locks of a connection when it closes, and a killed process's
// connections close with it. If a lock connection breaks while fn runs (the
// network, or the server restarting), its locks are gone and another replica
// may take one before fn's result is written; the result is written all the
// same, so a rotated Account Token fn obtained is never dropped.
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
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// writeTimeout bounds the write and commit that follow fn once ctx is done:
// see Update.
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
	stats     struct{ updates, contended, waiting, unchanged, lost atomic.Int64 }
}

// queries holds the SQL, with quoted table names, built once.
type queries struct {
	get, list, upsert, delete  string
	lock                       string // try the lock, without waiting
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
		st.lockConns = append(st.lockConns, &lockConn{cfg: pool.Config().ConnConfig, lost: &st.stats.lost})
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
		get:  `SELECT value FROM ` + table + where,
		lock: `SELECT pg_try_advisory_lock($1)`,
		list: `SELECT record_id FROM ` + table + ` WHERE kind = $1 AND local_user = $2 AND issuer = $3 ORDER BY record_id`,
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
// from [New] leaves its pool open. Updates still running lose their locks.
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
		Waiting: s.stats.waiting.Load(), Unchanged: s.stats.unchanged.Load(), LockConnsLost: s.stats.lost.Load()}
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
// store writes it even if ctx is done by then, within 30 seconds: fn may
// have renewed a rotating Account Token, and dropping the rotated token
// because a deadline passed during the renewal would lose it for good
// (spec 4.8).
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

	args := []any{string(key.Kind), key.User, key.Issuer, key.ID}
	id := s.lockID(args[0].(string), key.User, key.Issuer, key.ID)
	lc := s.lockConns[uint64(id)%uint64(len(s.lockConns))]
	stored, existed, err := s.lock(ctx, lc, id, args)
	if err != nil {
		return fmt.Errorf("pgstore: update %s: lock and read: %w", key, err)
	}
	defer lc.unlock(id)
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
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if next == nil {
		_, err = s.pool.Exec(wctx, s.q.delete, args...)
	} else {
		var sealed []byte
		if sealed, err = keystore.SealValue(s.sealer, key, next); err != nil {
			return fmt.Errorf("pgstore: update %s: seal: %w", key, err)
		}
		_, err = s.pool.Exec(wctx, s.q.upsert, append(args, sealed)...)
	}
	if err != nil {
		return fmt.Errorf("pgstore: update %s: write: %w", key, err)
	}
	return nil
}

// Polling for a lock another process holds: the first retry after
// minPoll, each later one twice as late, at most maxPoll apart, each wait
// drawn from [d/2, d) so that replicas don't retry in step.
const (
	minPoll = time.Millisecond
	maxPoll = 20 * time.Millisecond
)

// lock takes the advisory lock id on lc and reads the record, waiting for
// another process to release the lock until ctx is done.
func (s *Store) lock(ctx context.Context, lc *lockConn, id int64, args []any) (stored []byte, existed bool, err error) {
	wait := minPoll
	waiting := false
	defer func() {
		if waiting {
			s.stats.waiting.Add(-1)
		}
	}()
	for failures := 0; ; {
		got, v, err := lc.tryLockGet(s.q.lock, id, s.q.get, args)
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
// advisory locks for many Updates at once. Lock and unlock requests queue
// up while a round trip is in flight and go together in the next one (a
// pipelined batch), so the connection serves as many Updates as the server
// can run, not one per round trip.
type lockConn struct {
	cfg     *pgx.ConnConfig
	lost    *atomic.Int64
	mu      sync.Mutex
	queue   []*lockOp
	running bool      // a goroutine sends the queue
	conn    *pgx.Conn // nil until first used, or after it broke; used by the sender only
	closed  bool
}

// lockOp is one request on a lock connection: try a lock and read a
// record, or release a lock.
type lockOp struct {
	unlock bool
	id     int64
	lock   string // the try-lock statement
	get    string // the read, with args
	args   []any

	got   bool
	value []byte
	err   error
	done  chan struct{}
}

// submit queues op and waits for its answer.
func (l *lockConn) submit(op *lockOp) {
	op.done = make(chan struct{})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		op.err = errors.New("pgstore: store closed")
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
			close(op.done)
		}
	}
}

// run sends ops in one batch on the connection, connecting first if need
// be. An error that is not the server's answer closes the connection (its
// locks go with it); the next batch reconnects.
func (l *lockConn) run(ops []*lockOp) {
	fail := func(err error) {
		for _, op := range ops {
			if op.err == nil {
				op.err = err
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	if l.conn != nil && l.conn.IsClosed() {
		l.conn = nil
	}
	if l.conn == nil {
		c, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
		if err != nil {
			fail(err)
			return
		}
		l.conn = c
	}
	var b pgx.Batch
	for _, op := range ops {
		if op.unlock {
			b.Queue(`SELECT pg_advisory_unlock($1)`, op.id)
			continue
		}
		// The read is a statement of its own, so its snapshot is taken
		// once the lock is held and sees what the previous holder wrote.
		b.Queue(op.lock, op.id)
		b.Queue(op.get, op.args...)
	}
	br := l.conn.SendBatch(ctx, &b)
	for _, op := range ops {
		if op.unlock {
			_, op.err = br.Exec()
			continue
		}
		if op.err = br.QueryRow().Scan(&op.got); op.err != nil {
			_, _ = br.Exec() // the read's result
			continue
		}
		if op.err = br.QueryRow().Scan(&op.value); errors.Is(op.err, pgx.ErrNoRows) {
			op.value, op.err = nil, nil
		} else if op.err == nil && op.value == nil {
			op.value = []byte{} // an empty record
		}
	}
	err := br.Close()
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		fail(err)
		l.drop()
		return
	}
	// A statement that failed aborts the rest of its batch (one implicit
	// transaction): release the locks it didn't, each on its own, or the
	// keys would stay locked for as long as the connection lives.
	for _, op := range ops {
		if !op.unlock || op.err == nil {
			continue
		}
		if _, op.err = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, op.id); op.err != nil {
			l.drop() // closing the connection releases its locks
			return
		}
	}
}

// drop closes a connection that can't be trusted; its locks go with it.
func (l *lockConn) drop() {
	l.conn.Close(context.Background())
	l.conn = nil
	l.lost.Add(1)
}

// tryLockGet tries the lock id and reads the record with get and args, in
// one round trip. The value is nil when there is no record.
func (l *lockConn) tryLockGet(lock string, id int64, get string, args []any) (got bool, value []byte, err error) {
	op := &lockOp{id: id, lock: lock, get: get, args: args}
	l.submit(op)
	return op.got, op.value, op.err
}

// unlock releases the lock id. If the connection broke meanwhile, the lock
// is gone already.
func (l *lockConn) unlock(id int64) {
	l.submit(&lockOp{unlock: true, id: id})
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
