package keystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Memory is a [Store] that keeps records in the memory of one process. It
// suits tests and programs that need nothing to survive a restart; records
// are lost when the process exits.
//
// Update holds a lock for its key only, so fn may take its time (a token
// renewal over the network) without holding up updates of other keys. Values
// are copied in and out: changing a slice passed to or returned by the store
// never changes a stored record.
//
// The zero Memory is not ready for use; call [NewMemory].
type Memory struct {
	locks KeyLocks // one lock per key, held while fn runs

	mu sync.RWMutex // guards records, held only to read or write a map
	// records holds each group's records in a small slice rather than a
	// map: a group is one kind of record of one User at one issuer, mostly
	// a single record, and a map per group cost an Agent holding many
	// Sessions several hundred bytes per record.
	records map[group][]memRecord
}

type memRecord struct {
	id string
	v  []byte
}

func find(recs []memRecord, id string) int {
	for i := range recs {
		if recs[i].id == id {
			return i
		}
	}
	return -1
}

// group is the part of a Key that List filters on.
type group struct {
	kind   Kind
	user   string
	issuer string
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{records: make(map[group][]memRecord)}
}

// Get returns a copy of the record for key, or an error matching
// [ErrNotFound].
func (m *Memory) Get(ctx context.Context, key Key) ([]byte, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	v, ok := m.get(key)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return v, nil
}

// get returns a copy of the record for key and whether there is one.
func (m *Memory) get(key Key) ([]byte, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	recs := m.records[group{key.Kind, key.User, key.Issuer}]
	i := find(recs, key.ID)
	if i < 0 {
		return nil, false
	}
	return bytes.Clone(recs[i].v), true // a stored value is never nil, so neither is its clone
}

// Update replaces the record for key with what fn returns, as [Store]
// describes. It waits for the lock on key until ctx is done; once fn has
// returned, its result is stored even if ctx is done by then, because fn may
// have done something that can't be undone, such as use a rotating Account
// Token (spec 4.8). fn must not update key itself: it would wait for its
// own lock until ctx is done.
func (m *Memory) Update(ctx context.Context, key Key, fn func(current []byte) ([]byte, error)) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if fn == nil {
		return errors.New("keystore: Update needs a function")
	}
	unlock, err := m.locks.Lock(ctx, key)
	if err != nil {
		return fmt.Errorf("keystore: waiting to update %s: %w", key, err)
	}
	defer unlock() // deferred so that a panicking fn does not leave the key locked

	current, _ := m.get(key)
	next, err := fn(current)
	if err != nil {
		return err
	}
	m.put(key, next)
	return nil
}

// put stores a copy of v for key, or deletes the record when v is nil.
func (m *Memory) put(key Key, v []byte) {
	g := group{key.Kind, key.User, key.Issuer}
	m.mu.Lock()
	defer m.mu.Unlock()
	recs := m.records[g]
	i := find(recs, key.ID)
	if v == nil {
		if i < 0 {
			return
		}
		recs = slices.Delete(recs, i, i+1)
		if len(recs) == 0 {
			delete(m.records, g)
		} else {
			m.records[g] = recs
		}
		return
	}
	if i >= 0 {
		recs[i].v = bytes.Clone(v)
		return
	}
	m.records[g] = append(recs, memRecord{id: key.ID, v: bytes.Clone(v)})
}

// List returns the keys of every record of kind for user at issuer, in
// ascending order of ID.
func (m *Memory) List(ctx context.Context, kind Kind, user, issuer string) ([]Key, error) {
	if err := (Key{Kind: kind, User: user, Issuer: issuer}).Validate(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	keys := make([]Key, 0, len(m.records[group{kind, user, issuer}]))
	for _, r := range m.records[group{kind, user, issuer}] {
		keys = append(keys, Key{Kind: kind, User: user, Issuer: issuer, ID: r.id})
	}
	m.mu.RUnlock()
	slices.SortFunc(keys, func(a, b Key) int {
		return strings.Compare(a.ID, b.ID) // byte order, as SQL's BINARY collation
	})
	return keys, nil
}

// String describes the store without any record: records hold private
// keys and tokens.
func (m *Memory) String() string {
	if m == nil {
		return "keystore.Memory(nil)"
	}
	m.mu.RLock()
	n := 0
	for _, ids := range m.records {
		n += len(ids)
	}
	m.mu.RUnlock()
	return fmt.Sprintf("keystore.Memory(%d records, values redacted)", n)
}

// GoString is String, so %#v shows no record either.
func (m *Memory) GoString() string { return m.String() }

// Format writes String for every verb.
func (m *Memory) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(m.String())) }

// LogValue logs String.
func (m *Memory) LogValue() slog.Value { return slog.StringValue(m.String()) }
