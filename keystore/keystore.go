// Package keystore defines where a Personal Agent keeps what it must remember
// between requests, processes and replicas: User IDs, DPoP private keys,
// Sessions (ID, signed-in state, current Session Tokens), Account Tokens,
// conversation cursors and pending sign-ins.
//
// # The contract
//
// A [Store] holds opaque records addressed by a [Key]. Every record belongs to
// one local User at one Company, and a Company is identified by its OAuth
// issuer (spec 3.2), so two domains that name one issuer share every record.
//
//   - [Store.Get] returns the record or an error matching [ErrNotFound].
//   - [Store.Update] is an atomic read-modify-write of one record. The store
//     takes an exclusive lock on the key, across goroutines, processes and
//     replicas sharing the store, calls fn exactly once with the current value
//     (nil when there is none), and writes what fn returns (nil deletes the
//     record). If fn returns an error nothing is written and Update returns
//     that error unchanged. Because fn runs under the lock and is called
//     exactly once, it may do network I/O: that is how a rotating Account
//     Token is renewed by one process while another waits and then re-reads
//     the rotated token instead of losing it (spec 4.8).
//   - Once fn has returned a value, the store writes it even if ctx is done
//     by then: fn may have done what can't be undone, such as using a
//     rotating Account Token. If ctx is already done before the lock is
//     taken, fn is not called.
//   - fn must not Update its own key (it would wait for itself); a panic in
//     fn releases the lock.
//   - An empty, non-nil value is a record; only nil deletes.
//   - Key fields are compared exactly, byte for byte.
//   - A crash in the middle of a write leaves the previous value readable.
//   - [Store.List] returns the keys of one kind for one User and issuer, in
//     byte order of ID.
//   - Records of a kind whose [Kind.Secret] is true hold secrets: stores that
//     write to disk protect them (file mode 0600 at least, sealing where the
//     store offers it) and never log them.
//
// Every store in this module passes the same contract suite
// (package keystore/storetest); a third-party store should run it too.
package keystore

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotFound is returned by [Store.Get] when there is no record for the key.
var ErrNotFound = errors.New("keystore: record not found")

// Kind names what a record holds.
type Kind string

// The kinds of record the SDK keeps.
const (
	KindUserID        Kind = "user_id"        // the User ID for one issuer (spec 4.2)
	KindDPoPKey       Kind = "dpop_key"       // a DPoP private key (spec 4.3)
	KindSession       Kind = "session"        // a Session and its current tokens (spec 4.2, 4.3)
	KindAccountToken  Kind = "account_token"  // an Account Token with scopes and expiry (spec 4.8)
	KindCursor        Kind = "cursor"         // a conversation cursor (spec 7.5)
	KindPendingSignIn Kind = "pending_signin" // a Direct Sign-In waiting for its redirect (spec 4.5)
	KindOperation     Kind = "operation"      // an operation and its journalled confirm (OPS 6)
	KindPermission    Kind = "permission"     // a standing permission the User gave (OPS 5.1)
	KindAgentKey      Kind = "agent_key"      // the agent's own signing keys (spec 4.1)
	KindOutbox        Kind = "outbox"         // a conversation message not yet acknowledged (spec 7.3)
)

// Secret reports whether records of this kind hold secrets: private keys,
// Session Tokens, Account Tokens, PKCE verifiers, the agent's signing keys,
// or the User's own words waiting in a conversation outbox.
func (k Kind) Secret() bool {
	switch k {
	case KindDPoPKey, KindSession, KindAccountToken, KindPendingSignIn, KindAgentKey, KindOutbox:
		return true
	}
	return false
}

// Key addresses one record.
type Key struct {
	Kind   Kind
	User   string // the local User, as the application names them
	Issuer string // the Company's auth.issuer
	ID     string // distinguishes several records of one kind, such as Session names; may be empty
}

// Validate reports whether the key can address a record.
func (k Key) Validate() error {
	if k.Kind == "" {
		return errors.New("keystore: key has no kind")
	}
	if k.User == "" {
		return errors.New("keystore: key has no user")
	}
	if k.Issuer == "" {
		return errors.New("keystore: key has no issuer")
	}
	return nil
}

// String returns the key in a readable form. Keys hold no secrets.
func (k Key) String() string {
	return fmt.Sprintf("%s/%s@%s#%s", k.Kind, k.User, k.Issuer, k.ID)
}

// Store is the keystore contract. Implementations are safe for concurrent use.
type Store interface {
	// Get returns the record for key, or an error matching ErrNotFound.
	Get(ctx context.Context, key Key) ([]byte, error)
	// Update atomically replaces the record for key with fn's result, under an
	// exclusive lock on key that holds across processes sharing the store.
	// fn gets nil when the record does not exist and is called exactly once.
	// A nil result deletes the record; an error leaves it unchanged and is
	// returned as it is.
	Update(ctx context.Context, key Key, fn func(current []byte) ([]byte, error)) error
	// List returns the keys of every record of kind for user at issuer, in
	// ascending order of ID.
	List(ctx context.Context, kind Kind, user, issuer string) ([]Key, error)
}
