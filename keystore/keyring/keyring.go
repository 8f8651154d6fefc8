// Package keyring is a [keystore.Store] in the operating system's keyring:
// the Secret Service on Linux and the BSDs (GNOME Keyring, or another
// provider such as KeePassXC), the Keychain on macOS and the Credential Manager on Windows, through
// github.com/zalando/go-keyring. It suits desktop agents and the poppy
// command, where private keys and tokens belong with the User's other
// secrets, protected by their login, rather than in a file.
//
// # Layout
//
// Each record is one or more keyring items of the service named in
// [Options] ("poppy" by default), with a readable account name such as
//
//	r/session/alice/https:%2F%2Fauth.example.com/main
//
// whose parts are escaped so that none can be taken for another. Keyrings
// limit the size of an item (the Keychain to about 3,000 bytes, the
// Credential Manager to 2,560 bytes), so a value that does not fit one item
// is split into chunk items, and the record's own item holds only the number
// of chunks and a SHA-256 of the value. The store uses the Windows limit on
// every platform but macOS, so that a keyring's layout is the same
// everywhere and the chunking that Windows needs is what Linux CI tests. A
// JWK, a Session and an Account Token always fit, however many chunks they
// take.
//
// Keyrings can't list items, so each (kind, User, issuer) also has an index
// item ("i/…") holding the IDs of its records, which [Store.List] reads.
//
// # Atomicity
//
// Keyrings have no transactions. [Store.Update] holds a lock for its key
// that works across the processes of one machine: a lock file per key in
// [Options.LockDir], locked with flock(2) on Unix and LockFileEx on Windows.
// The kernel releases either when its holder exits or is killed, so a
// crashed process never leaves a key locked. Every process sharing a keyring
// must use the same lock directory, which the default (under
// os.UserCacheDir) ensures for one OS user. Lock files are empty and named by
// a hash, so they reveal no User; a record's lock file is removed with the
// record, except on Windows, which can't remove a file another process holds
// open. Platforms with neither lock (Plan 9, WebAssembly) can't use the
// store; go-keyring does not support them either.
//
// A write puts the new chunks in items that the current value does not use,
// then replaces the record's item (one keyring call, which keyrings do
// atomically), then removes the old chunks, so a process killed in the middle
// of a write leaves the previous value readable. Chunks written by a killed
// process may stay until the record is written again. A new record is added
// to its index before it is written and removed after it is deleted, so
// after such a crash List may name a record that Get does not find, never
// the other way round.
//
// [Store.Get] and [Store.List] take no lock: they check the chunks they read
// against the SHA-256 and, if a concurrent write changed them, read again
// under the lock.
//
// The keyring calls themselves can't be cancelled: ctx is checked between
// calls and bounds waiting for a lock, but a keyring that hangs (waiting for
// the User to unlock it, say) holds up the call.
package keyring

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	gokeyring "github.com/zalando/go-keyring"

	"github.com/poppyproto/poppy/internal/filelock"
	"github.com/poppyproto/poppy/keystore"
)

// DefaultService is the keyring service name when [Options.Service] is
// empty.
const DefaultService = "poppy"

// Options configure a [Store]. A nil *Options means the defaults.
type Options struct {
	// Service is the keyring service (the application's name in the
	// keyring) that every item of the store belongs to; DefaultService if
	// empty. Stores with different services share nothing.
	Service string

	// LockDir is the directory of the lock files that make Update atomic
	// across processes; it is created with mode 0700 if needed. Every
	// process sharing the keyring must use the same one. If empty, it is
	// "poppy/keyring-locks" in os.UserCacheDir.
	LockDir string
}

// Store is a [keystore.Store] in the OS keyring. It is safe for concurrent
// use by many goroutines and processes of one OS user on one machine.
type Store struct {
	service string
	lockDir string
	locks   keyLocks

	// chunkLimit, when not zero, replaces the platform's item size limit
	// (for tests).
	chunkLimit int
}

// New returns a store in the OS keyring. It does not contact the keyring:
// [Store.Ping] checks that one answers.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Service == "" {
		o.Service = DefaultService
	}
	if o.LockDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("keyring: no lock directory: %w", err)
		}
		o.LockDir = filepath.Join(cache, "poppy", "keyring-locks")
	}
	if err := os.MkdirAll(o.LockDir, 0o700); err != nil {
		return nil, fmt.Errorf("keyring: lock directory: %w", err)
	}
	return &Store{service: o.Service, lockDir: o.LockDir}, nil
}

// Ping reports whether the OS keyring answers, by looking up an item that
// does not exist. On Linux it fails when there is no D-Bus session bus or no
// Secret Service on it. If ctx ends first Ping returns ctx's error, though
// the lookup may go on in the background until the keyring answers.
func (s *Store) Ping(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		_, err := gokeyring.Get(s.service, "ping")
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, gokeyring.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("keyring: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// esc escapes one part of an account name so that it holds no '/'.
func esc(s string) string { return url.PathEscape(s) }

// recordAccount names the item of a record.
func recordAccount(k keystore.Key) string {
	return "r/" + esc(string(k.Kind)) + "/" + esc(k.User) + "/" + esc(k.Issuer) + "/" + esc(k.ID)
}

// indexAccount names the index item of a kind, User and issuer.
func indexAccount(kind keystore.Kind, user, issuer string) string {
	return "i/" + esc(string(kind)) + "/" + esc(user) + "/" + esc(issuer)
}

// chunkAccount names chunk i in one of the two chunk slots of an item.
func chunkAccount(account string, slot byte, i int) string {
	return account + "/" + string(slot) + strconv.Itoa(i)
}

// An item's value is one of
//
//	"1=" base64(value)                          the value itself
//	"1c=" slot ":" chunks ":" hex(sha256(value)) a value in chunk items
//
// and each chunk item holds a piece of base64(value). Base64 keeps every
// value text, which all keyrings store faithfully.
const (
	inlinePrefix  = "1="
	chunkedPrefix = "1c="
)

// header is what an item says about its value.
type header struct {
	exists bool
	slot   byte // 0 for a value held inline, else 'a' or 'b'
	chunks int
	sum    string // hex SHA-256 of the value, for chunked values
}

// errTorn reports chunks that changed while they were read without a lock.
var errTorn = errors.New("keyring: chunks changed while being read")

// read returns the value of the item at account and its header, or a header
// with exists false. Without the item's lock, it may return errTorn.
func (s *Store) read(ctx context.Context, account string) ([]byte, header, error) {
	item, err := gokeyring.Get(s.service, account)
	if errors.Is(err, gokeyring.ErrNotFound) {
		return nil, header{}, nil
	}
	if err != nil {
		return nil, header{}, err
	}
	if enc, ok := strings.CutPrefix(item, inlinePrefix); ok {
		v, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, header{}, errors.New("damaged item")
		}
		if v == nil {
			v = []byte{}
		}
		return v, header{exists: true}, nil
	}
	h, ok := parseChunked(item)
	if !ok {
		return nil, header{}, errors.New("item in an unknown format")
	}
	var enc strings.Builder
	for i := range h.chunks {
		if err := ctx.Err(); err != nil {
			return nil, header{}, err
		}
		piece, err := gokeyring.Get(s.service, chunkAccount(account, h.slot, i))
		if errors.Is(err, gokeyring.ErrNotFound) {
			return nil, header{}, errTorn
		}
		if err != nil {
			return nil, header{}, err
		}
		enc.WriteString(piece)
	}
	v, err := base64.StdEncoding.DecodeString(enc.String())
	if err != nil || hexSum(v) != h.sum {
		return nil, header{}, errTorn
	}
	return v, h, nil
}

func parseChunked(item string) (header, bool) {
	rest, ok := strings.CutPrefix(item, chunkedPrefix)
	if !ok {
		return header{}, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 || (parts[0] != "a" && parts[0] != "b") {
		return header{}, false
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 1 || len(parts[2]) != 2*sha256.Size {
		return header{}, false
	}
	return header{exists: true, slot: parts[0][0], chunks: n, sum: parts[2]}, true
}

func hexSum(v []byte) string {
	sum := sha256.Sum256(v)
	return hex.EncodeToString(sum[:])
}

// readConsistent reads the item at account without a lock and, if that
// fails, again under the lock: a concurrent write may have changed or
// removed chunks between the keyring's lookup of an item and its read of
// the secret, which some keyrings report as an error of their own.
func (s *Store) readConsistent(ctx context.Context, account string) ([]byte, header, error) {
	v, h, err := s.read(ctx, account)
	if err == nil || ctx.Err() != nil {
		return v, h, err
	}
	unlock, err := s.locks.lock(ctx, s.lockPath(account))
	if err != nil {
		return nil, header{}, err
	}
	defer unlock(false)
	v, h, err = s.read(ctx, account)
	if errors.Is(err, errTorn) {
		// Under the lock nothing writes: the chunks are damaged.
		return nil, header{}, errors.New("damaged chunks")
	}
	return v, h, err
}

// write replaces the value of the item at account, whose current header is
// old, holding the item's lock.
func (s *Store) write(account string, old header, value []byte) error {
	enc := base64.StdEncoding.EncodeToString(value)
	if len(inlinePrefix)+len(enc) <= s.limit(account) {
		if err := gokeyring.Set(s.service, account, inlinePrefix+enc); err != nil {
			return err
		}
		s.removeChunks(account, old)
		return nil
	}
	slot := byte('a')
	if old.slot == 'a' {
		slot = 'b'
	}
	// The longest chunk name the value could need bounds every chunk.
	size := s.limit(chunkAccount(account, slot, len(enc)))
	if size < 1 {
		return errors.New("the key is too long for this keyring")
	}
	n := 0
	for off := 0; off < len(enc); off += size {
		if err := gokeyring.Set(s.service, chunkAccount(account, slot, n), enc[off:min(off+size, len(enc))]); err != nil {
			return err
		}
		n++
	}
	item := chunkedPrefix + string(slot) + ":" + strconv.Itoa(n) + ":" + hexSum(value)
	if err := gokeyring.Set(s.service, account, item); err != nil {
		return err
	}
	s.removeChunks(account, old)
	return nil
}

// remove deletes the item at account and its chunks, holding its lock.
func (s *Store) remove(account string, old header) error {
	if err := gokeyring.Delete(s.service, account); err != nil && !errors.Is(err, gokeyring.ErrNotFound) {
		return err
	}
	s.removeChunks(account, old)
	return nil
}

// removeChunks deletes the chunks a header no longer in use pointed to, last
// first. Failures are ignored: the chunks are not read again, and a later
// write to their slot replaces them.
func (s *Store) removeChunks(account string, old header) {
	for i := old.chunks - 1; i >= 0; i-- {
		gokeyring.Delete(s.service, chunkAccount(account, old.slot, i))
	}
}

// Get returns the record for key, or an error matching [keystore.ErrNotFound].
func (s *Store) Get(ctx context.Context, key keystore.Key) ([]byte, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, h, err := s.readConsistent(ctx, recordAccount(key))
	if err != nil {
		return nil, fmt.Errorf("keyring: get %s: %w", key, err)
	}
	if !h.exists {
		return nil, fmt.Errorf("keyring: get %s: %w", key, keystore.ErrNotFound)
	}
	return v, nil
}

// Update atomically replaces the record for key with fn's result, as
// [keystore.Store] describes, under a lock that holds across the processes
// of this machine. ctx bounds waiting for the lock and reading the record;
// once fn has returned a value, the store writes it even if ctx is done by
// then, since fn may have renewed a rotating Account Token (spec 4.8).
func (s *Store) Update(ctx context.Context, key keystore.Key, fn func(current []byte) ([]byte, error)) error {
	if err := key.Validate(); err != nil {
		return err
	}
	account := recordAccount(key)
	unlock, err := s.locks.lock(ctx, s.lockPath(account))
	if err != nil {
		return err
	}
	deleted := false
	defer func() { unlock(deleted) }()

	current, old, err := s.read(ctx, account)
	if errors.Is(err, errTorn) {
		err = errors.New("damaged chunks")
	}
	if err != nil {
		return fmt.Errorf("keyring: update %s: read: %w", key, err)
	}
	next, err := fn(current)
	if err != nil {
		return err // unchanged, as the contract says
	}
	// From here on ctx is not consulted: fn's result must be written.
	switch {
	case next == nil && !old.exists:
		return nil
	case next != nil && old.exists && bytes.Equal(next, current):
		// Unchanged, as when fn finds a token another process renewed:
		// keyring writes are slow, and this one would change nothing.
		return nil
	case next == nil:
		if err := s.remove(account, old); err != nil {
			return fmt.Errorf("keyring: update %s: delete: %w", key, err)
		}
		deleted = true
		if err := s.updateIndex(key, false); err != nil {
			return fmt.Errorf("keyring: update %s: index: %w", key, err)
		}
		return nil
	}
	if !old.exists {
		// Listed before written: a crash in between leaves a listed key
		// that Get does not find, never a record that List misses.
		if err := s.updateIndex(key, true); err != nil {
			return fmt.Errorf("keyring: update %s: index: %w", key, err)
		}
	}
	if err := s.write(account, old, next); err != nil {
		return fmt.Errorf("keyring: update %s: write: %w", key, err)
	}
	return nil
}

// updateIndex adds key's ID to the index of its kind, User and issuer, or
// removes it, under the index's lock.
func (s *Store) updateIndex(key keystore.Key, add bool) error {
	account := indexAccount(key.Kind, key.User, key.Issuer)
	// The record's lock is held and fn has run: waiting for the index must
	// not be cut short, or the record would be written but not listed.
	unlock, err := s.locks.lock(context.Background(), s.lockPath(account))
	if err != nil {
		return err
	}
	empty := false
	defer func() { unlock(empty) }()
	data, h, err := s.read(context.Background(), account)
	if errors.Is(err, errTorn) {
		err = errors.New("damaged chunks")
	}
	if err != nil {
		return err
	}
	ids, err := decodeIndex(data, h)
	if err != nil {
		return err
	}
	i, found := slices.BinarySearch(ids, key.ID)
	switch {
	case add && !found:
		ids = slices.Insert(ids, i, key.ID)
	case !add && found:
		ids = slices.Delete(ids, i, i+1)
	default:
		return nil
	}
	if len(ids) == 0 {
		empty = true
		return s.remove(account, h)
	}
	data, err = json.Marshal(ids)
	if err != nil {
		return err
	}
	return s.write(account, h, data)
}

func decodeIndex(data []byte, h header) ([]string, error) {
	if !h.exists {
		return nil, nil
	}
	var ids []string
	if err := json.Unmarshal(data, &ids); err != nil {
		return nil, errors.New("damaged index")
	}
	slices.Sort(ids)
	return ids, nil
}

// List returns the keys of every record of kind for user at issuer, in
// ascending order of ID.
func (s *Store) List(ctx context.Context, kind keystore.Kind, user, issuer string) ([]keystore.Key, error) {
	probe := keystore.Key{Kind: kind, User: user, Issuer: issuer}
	if err := probe.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, h, err := s.readConsistent(ctx, indexAccount(kind, user, issuer))
	if err != nil {
		return nil, fmt.Errorf("keyring: list %s: %w", probe, err)
	}
	ids, err := decodeIndex(data, h)
	if err != nil {
		return nil, fmt.Errorf("keyring: list %s: %w", probe, err)
	}
	keys := make([]keystore.Key, len(ids))
	for i, id := range ids {
		keys[i] = keystore.Key{Kind: kind, User: user, Issuer: issuer, ID: id}
	}
	return keys, nil
}

// lockPath returns the lock file of the item at account, named by a hash of
// the service and account so that no User name appears in a file name.
func (s *Store) lockPath(account string) string {
	return filelock.Name(s.lockDir, s.service, account)
}

// limit returns the longest value a keyring item of the store's service can
// hold under account.
func (s *Store) limit(account string) int {
	if s.chunkLimit > 0 {
		return s.chunkLimit
	}
	return platformLimit(s.service, account)
}

var _ keystore.Store = (*Store)(nil)
