// Package sqlitestore is the embedded default keystore: every record in one
// SQLite database file, through a pure-Go driver (no cgo), shared safely by
// the processes of one machine. It lives in its own package so that
// importing the SDK does not bring in the SQLite driver.
package sqlitestore

// Design of the SQLite store.
//
// One database file holds every record; a command-line process, a script and
// a long-running agent may all open it at once. SQLite runs in WAL mode, so
// reads never wait for writes, and every write is one short transaction
// (BEGIN IMMEDIATE, one statement, COMMIT), so a crash at any point leaves
// either the old value or the new one.
//
// Update needs more than a transaction: fn runs under an exclusive lock on
// its key that holds across processes, and fn may do network I/O. Holding a
// SQLite write transaction across fn would do that, but SQLite locks the
// whole database, so one slow token renewal would stall every write of every
// other key in every process (and make them fail with SQLITE_BUSY once the
// busy timeout passes). So the lock on a key is a lock file instead
// (package internal/filelock), taken before the read and released after the commit:
//
//	lock key (in-process, then lock file) → read → fn → write transaction → unlock
//
// Only Update writes, and every Update of a key holds that key's lock, so no
// write of the key can come between the read and the write. The kernel
// releases the lock file when a process dies, so a crash never leaves a key
// locked. Goroutines of one process first queue on an in-process lock for the
// key, so only one of them at a time polls the lock file, and they also take
// turns for the short write transactions, so they don't wait in SQLite's busy
// handler for each other.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/poppyproto/poppy/internal/filelock"
	"github.com/poppyproto/poppy/keystore"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver; pure Go, no cgo
)

const (
	// sqliteSchemaVersion is the PRAGMA user_version of the schema this code
	// writes. A database with a higher version was written by a newer SDK.
	sqliteSchemaVersion = 1
	// sqliteApplicationID is the PRAGMA application_id of a keystore
	// database ("PPY1"), so that a file of another program isn't taken for
	// one.
	sqliteApplicationID = 0x50505931
	// defaultBusyTimeout is the default of Options.BusyTimeout.
	defaultBusyTimeout = 5 * time.Second
)

// Store is a [keystore.Store] kept in one SQLite database file, which several
// processes may share: command-line tools, scripts and a long-running
// agent can all use one file at once. Open one with [Open]; [DefaultPath]
// names the usual file. It is safe for concurrent use.
//
// Update takes an exclusive lock on its key that holds across goroutines and
// processes, reads the record, calls fn once, and writes fn's result in a
// SQLite transaction, so a crash (even SIGKILL) at any point leaves the
// previous value readable, and a crashed process never leaves a key locked.
// The lock covers one key: while fn renews a token for one User, updates of
// other keys go ahead. The database runs in WAL mode with synchronous=FULL, so
// a committed write also survives a power cut.
//
// Without a Sealer in [Options], values are stored as they are: secrets
// such as DPoP private keys and Account Tokens are then protected only by
// the file mode: the database and its -wal and -shm files are
// created with mode 0600, and if they exist with permissions for group or
// others, Open removes those. Anyone who can read the file, or a copy or back-up of
// it, can read every record.
//
// Next to the database, Open makes a directory, the file name followed
// by "-locks" (mode 0700), that holds an empty lock file for each key being
// updated.
type Store struct {
	db      *sql.DB
	stmts   sqliteStmts
	lockDir string
	locks   keystore.KeyLocks // in-process lock for each key, taken before its lock file
	sealer  keystore.Sealer
	writeMu sync.Mutex // this process's write transactions take turns

	beforeCommit func() // test hook, called after the write statement and before COMMIT
}

// sqliteStmts are the store's statements, prepared once (preparing costs
// about as much as running one).
type sqliteStmts struct {
	get, list, put, del *sql.Stmt
}

// Options configures [Open]. A nil *Options means the
// defaults.
type Options struct {
	// BusyTimeout bounds how long one statement waits for another
	// process's write transaction on the database to end. Those
	// transactions are short (one statement each); waiting for the lock on a
	// key, which may be held while a token is renewed over the network, is
	// bounded by the ctx passed to Update instead. Zero means 5 seconds.
	BusyTimeout time.Duration
	// Sealer, if not nil, seals the values of secret records (private keys,
	// Session and Account Tokens, pending sign-ins; see keystore.Kind.Secret)
	// before they are written and opens them after they are read. Without
	// one, values are stored as they are. A store with a Sealer refuses to
	// read an unsealed secret record, and one without refuses a sealed one,
	// with an error matching keystore.ErrCannotOpen.
	Sealer keystore.Sealer
}

// DefaultPath returns the usual place of the keystore of the current OS
// user: poppy/keystore.db in [os.UserConfigDir] (for example
// ~/.config/poppy/keystore.db on Linux).
func DefaultPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("sqlitestore: no default path: %w", err)
	}
	return filepath.Join(dir, "poppy", "keystore.db"), nil
}

// Open opens the SQLite keystore at path, creating the file (mode 0600)
// and its directory (mode 0700) if they don't exist. It is safe for several
// processes to open one new file at once: each creates the schema only if no
// other has. It fails if the file holds a schema newer than this SDK knows,
// or is not a new, empty file or a keystore: another program's database
// (ErrForeignDatabase) is left exactly as it was, its mode included. The
// store must be closed with [Store.Close].
func Open(path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = defaultBusyTimeout
	}
	if path == "" {
		return nil, errors.New("sqlitestore: no SQLite path")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	lockDir := path + "-locks"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("sqlitestore: creating %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", sqliteDSN(path, o.BusyTimeout))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: opening %s: %w", path, err)
	}
	// Before anything is changed (its mode, a lock directory beside it, its
	// journal mode, a table): the file must be new and empty or already a
	// keystore, never another program's database.
	if err := retryBusy(o.BusyTimeout, func() error { return checkOwnership(db) }); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: opening %s: %w", path, err)
	}
	if err := os.Mkdir(lockDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	if err := tightenModes(path); err != nil {
		db.Close()
		return nil, err
	}

	// A few connections let Gets run side by side; writes take turns anyway.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := &Store{db: db, lockDir: lockDir, sealer: o.Sealer}
	if err := s.initRetrying(o.BusyTimeout); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: opening %s: %w", path, err)
	}
	if err := s.prepare(); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlitestore: opening %s: %w", path, err)
	}
	// Switching to WAL mode created the -wal and -shm files. SQLite gives
	// them the mode of the database, but check: they may be left over from a
	// time the database had a looser mode.
	if err := tightenModes(path); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// sqliteDSN returns the data source name for the database at path. Every
// connection gets the busy timeout, synchronous=FULL and secure_delete, and begins
// transactions with BEGIN IMMEDIATE, which takes the write lock at once
// instead of failing at the first write when another process got there first.
func sqliteDSN(path string, busy time.Duration) string {
	// A file: URI, so that '?' or '#' in path can't be taken for a query.
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows: file:///C:/...
	}
	u := url.URL{Scheme: "file", Path: p}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	// Deleted and overwritten records are zeroed in the file, so that a
	// deleted Account Token can't be read from free pages (docs/stores.md).
	q.Add("_pragma", "secure_delete(ON)")
	q.Set("_txlock", "immediate")
	return u.String() + "?" + q.Encode()
}

// createPrivate creates an empty file at path with mode 0600 unless something
// is already there. (An empty file is an empty SQLite database.)
//
// It never opens path itself: closing any descriptor of a database file drops
// every POSIX lock this process holds on it, including the locks of SQLite
// connections that another store in this process may already have opened.
// So the file is made under a temporary name and linked into place, which
// also fails, rather than replaces, if another process created path first.
func createPrivate(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return err // nil when path exists
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".new-*") // mode 0600
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	err = os.Link(tmp.Name(), path)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	// The file system has no hard links: create path in place. The window
	// for the lock problem above is then a few microseconds after creation.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// tightenModes removes group and other permissions from the database at path,
// its -wal, -shm and -journal files and its lock directory, where they exist.
func tightenModes(path string) error {
	if runtime.GOOS == "windows" {
		return nil // no Unix modes; files inherit the ACL of the directory
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal", path + "-locks"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sqlitestore: %w", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(p, perm&^0o077); err != nil {
				return fmt.Errorf("sqlitestore: %s has mode %v and can't be made private: %w", p, perm, err)
			}
		}
	}
	return nil
}

// init switches the database to WAL mode and creates the schema if it is not
// there yet. Two processes may do this at once on a new file: the schema is
// created in a BEGIN IMMEDIATE transaction that first reads user_version, so
// the second process waits for the first and then finds the schema in place.
// initRetrying runs init, again after a short sleep while SQLite answers
// SQLITE_BUSY, for at most busy. Several processes opening a new file at once
// contend for the switch to WAL mode and for the WAL index's first set-up,
// where SQLite may return SQLITE_BUSY without waiting in its busy handler.
func (s *Store) initRetrying(busy time.Duration) error {
	return retryBusy(busy, s.init)
}

// retryBusy runs fn, again after a short sleep while SQLite answers
// SQLITE_BUSY, for at most busy.
func retryBusy(busy time.Duration, fn func() error) error {
	deadline := time.Now().Add(busy)
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Duration(1+attempt%8) * 5 * time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED.
func isBusy(err error) bool {
	var se interface{ Code() int }
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == 5 || c == 6
	}
	return strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked")
}

func (s *Store) init() error {
	// Open takes no ctx (like sql.Open); every step here is bounded by
	// the busy timeout.
	ctx := context.Background()
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("can't use WAL mode (journal mode is %q)", mode)
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var appID, version int
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if appID != 0 && appID != sqliteApplicationID {
		return fmt.Errorf("not a keystore database (application_id %#x)", appID)
	}
	if appID == 0 {
		// Not ours yet: only an empty database becomes a keystore (another
		// process may have created the schema since checkOwnership).
		var objects int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&objects); err != nil {
			return err
		}
		if objects > 0 || version != 0 {
			return ErrForeignDatabase
		}
	}
	switch {
	case version == sqliteSchemaVersion:
		return nil
	case version > sqliteSchemaVersion:
		return fmt.Errorf("keystore schema version %d is newer than this SDK supports (%d)", version, sqliteSchemaVersion)
	}
	for _, stmt := range []string{
		// Each column holds one field of keystore.Key; value holds the record.
		`CREATE TABLE IF NOT EXISTS records (
			kind       TEXT NOT NULL,
			local_user TEXT NOT NULL,
			issuer     TEXT NOT NULL,
			id         TEXT NOT NULL,
			value      BLOB NOT NULL,
			PRIMARY KEY (kind, local_user, issuer, id)
		) WITHOUT ROWID`,
		fmt.Sprintf("PRAGMA application_id = %d", sqliteApplicationID),
		fmt.Sprintf("PRAGMA user_version = %d", sqliteSchemaVersion),
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ErrForeignDatabase is returned by Open for a file that is a database of
// another program: neither empty nor a keystore. Open changes nothing in it.
var ErrForeignDatabase = errors.New("sqlitestore: the file is another program's database, not a keystore")

// checkOwnership reads, without writing anything, whether db is new (no
// schema at all) or a keystore, and fails with ErrForeignDatabase
// otherwise. A file that isn't a SQLite database fails too.
func checkOwnership(db *sql.DB) error {
	ctx := context.Background() // bounded by the busy timeout, like init
	var appID, version, objects int
	// One statement, so one snapshot: another process may be creating the
	// schema at this moment.
	err := db.QueryRowContext(ctx, `SELECT (SELECT application_id FROM pragma_application_id()),
		(SELECT user_version FROM pragma_user_version()), (SELECT count(*) FROM sqlite_master)`).Scan(&appID, &version, &objects)
	if err != nil {
		return err
	}
	switch {
	case appID == sqliteApplicationID:
		return nil
	case appID == 0 && version == 0 && objects == 0:
		return nil // empty: it becomes a keystore
	}
	return ErrForeignDatabase
}

func (s *Store) prepare() error {
	for _, st := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.stmts.get, `SELECT value FROM records WHERE kind = ? AND local_user = ? AND issuer = ? AND id = ?`},
		{&s.stmts.list, `SELECT id FROM records WHERE kind = ? AND local_user = ? AND issuer = ? ORDER BY id`}, // BINARY collation: byte order
		{&s.stmts.put, `INSERT INTO records (kind, local_user, issuer, id, value) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (kind, local_user, issuer, id) DO UPDATE SET value = excluded.value`},
		{&s.stmts.del, `DELETE FROM records WHERE kind = ? AND local_user = ? AND issuer = ? AND id = ?`},
	} {
		stmt, err := s.db.Prepare(st.sql)
		if err != nil {
			return err
		}
		*st.stmt = stmt
	}
	return nil
}

// Get returns the record for key, or an error matching [keystore.ErrNotFound].
func (s *Store) Get(ctx context.Context, key keystore.Key) ([]byte, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	v, ok, err := s.read(ctx, key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", keystore.ErrNotFound, key)
	}
	return v, nil
}

// read returns the record for key and whether there is one.
func (s *Store) read(ctx context.Context, key keystore.Key) ([]byte, bool, error) {
	var v []byte
	err := s.stmts.get.QueryRowContext(ctx, string(key.Kind), key.User, key.Issuer, key.ID).Scan(&v) // Scan copies into v
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("sqlitestore: reading %s: %w", key, err)
	}
	if v == nil {
		v = []byte{} // an empty record exists; only a missing one is nil
	}
	v, err = keystore.OpenValue(s.sealer, key, v)
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// Update replaces the record for key with what fn returns, as [Store]
// describes. It waits for the lock on key, held by this or another process,
// until ctx is done. Once fn has returned, its result is written even if ctx
// is done by then, because fn may have done something that can't be undone,
// such as use a rotating Account Token (spec 4.8); that write waits at most
// [Options.BusyTimeout] for other processes. fn must not update key
// itself: it would wait for its own lock until ctx is done.
func (s *Store) Update(ctx context.Context, key keystore.Key, fn func(current []byte) ([]byte, error)) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if fn == nil {
		return errors.New("sqlitestore: Update needs a function")
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return fmt.Errorf("sqlitestore: waiting to update %s: %w", key, err)
	}
	deleted := false
	defer func() { unlock(deleted) }() // deferred so that a panicking fn does not leave the key locked

	current, exists, err := s.read(ctx, key)
	if err != nil {
		return err
	}
	next, err := fn(current)
	if err != nil {
		return err
	}
	if next == nil && !exists {
		return nil
	}
	if next != nil {
		if next, err = keystore.SealValue(s.sealer, key, next); err != nil {
			return err
		}
	}
	if err := s.write(context.WithoutCancel(ctx), key, next); err != nil {
		return err
	}
	deleted = next == nil
	if deleted && key.Kind.Secret() {
		// secure_delete zeroes the record in the database's pages, but the
		// write-ahead log still holds the frames that wrote it: copy the
		// log into the database and empty it. Best effort: a reader of
		// another process can make SQLite give up; the next checkpoint
		// then does it.
		_, _ = s.db.ExecContext(context.WithoutCancel(ctx), "PRAGMA wal_checkpoint(TRUNCATE)")
	}
	return nil
}

// lock takes the in-process lock on key, then its lock file. unlock releases
// both; with deleted, it also removes the lock file.
func (s *Store) lock(ctx context.Context, key keystore.Key) (unlock func(deleted bool), err error) {
	unlockKey, err := s.locks.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	name := filelock.Name(s.lockDir, string(key.Kind), key.User, key.Issuer, key.ID)
	fl, err := filelock.Acquire(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		// Someone removed the lock directory; make it again.
		if err = os.MkdirAll(s.lockDir, 0o700); err == nil {
			fl, err = filelock.Acquire(ctx, name)
		}
	}
	if err != nil {
		unlockKey()
		return nil, err
	}
	return func(deleted bool) {
		// An error here leaves nothing locked: closing the file releases
		// the lock, and a lock file left behind is harmless.
		_ = fl.Unlock(deleted)
		unlockKey()
	}, nil
}

// write stores v for key, or deletes the record when v is nil, in one
// transaction.
func (s *Store) write(ctx context.Context, key keystore.Key, v []byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see sqliteDSN)
	if err != nil {
		return fmt.Errorf("sqlitestore: writing %s: %w", key, err)
	}
	defer tx.Rollback()
	args := []any{string(key.Kind), key.User, key.Issuer, key.ID}
	if v == nil {
		_, err = tx.StmtContext(ctx, s.stmts.del).ExecContext(ctx, args...)
	} else {
		_, err = tx.StmtContext(ctx, s.stmts.put).ExecContext(ctx, append(args, v)...)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: writing %s: %w", key, err)
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: writing %s: %w", key, err)
	}
	return nil
}

// List returns the keys of every record of kind for user at issuer, in
// ascending byte order of ID.
func (s *Store) List(ctx context.Context, kind keystore.Kind, user, issuer string) ([]keystore.Key, error) {
	if err := (keystore.Key{Kind: kind, User: user, Issuer: issuer}).Validate(); err != nil {
		return nil, err
	}
	rows, err := s.stmts.list.QueryContext(ctx, string(kind), user, issuer)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: listing %s for %s@%s: %w", kind, user, issuer, err)
	}
	defer rows.Close()
	var keys []keystore.Key
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlitestore: listing %s for %s@%s: %w", kind, user, issuer, err)
		}
		keys = append(keys, keystore.Key{Kind: kind, User: user, Issuer: issuer, ID: id})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: listing %s for %s@%s: %w", kind, user, issuer, err)
	}
	return keys, nil
}

// Close closes the database. Operations in progress may fail, and the store
// can't be used afterwards.
func (s *Store) Close() error {
	for _, stmt := range []*sql.Stmt{s.stmts.get, s.stmts.list, s.stmts.put, s.stmts.del} {
		if stmt != nil {
			stmt.Close()
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("sqlitestore: closing: %w", err)
	}
	return nil
}
