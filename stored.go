package poppy

// Reading what the keystore holds for a User at a Company, without a
// network request: for status pages and the poppy command's "status".

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/poppyproto/poppy/keystore"
)

// StoredSession describes a Session kept in the keystore. It holds no token.
type StoredSession struct {
	// Name is the Session's name (SessionOptions.Name).
	Name string
	// ID is the Company's session_id.
	ID string
	// SignedIn reports whether the Session is signed in, with the Account
	// Token labelled Account, for Scopes.
	SignedIn bool
	Account  string
	Scopes   []string
	// Expiry is when the latest of its stored Session Tokens expires; zero
	// when it holds none.
	Expiry time.Time
}

// StoredSessions lists the Sessions of the local user at the Company whose
// issuer is issuer, as kept in the keystore, in order of name. It sends no
// request.
func (a *Agent) StoredSessions(ctx context.Context, user, issuer string) ([]StoredSession, error) {
	keys, err := a.store.List(ctx, keystore.KindSession, user, issuer)
	if err != nil {
		return nil, fmt.Errorf("poppy: listing Sessions: %w", err)
	}
	out := make([]StoredSession, 0, len(keys))
	for _, k := range keys {
		b, err := a.store.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("poppy: reading Session: %w", err)
		}
		var rec sessionRecord
		if json.Unmarshal(b, &rec) != nil {
			continue
		}
		s := StoredSession{Name: k.ID, ID: rec.SessionID, SignedIn: rec.SignedIn, Account: rec.Account, Scopes: strings.Fields(rec.Scope)}
		for _, t := range rec.Tokens {
			if t.Expiry.After(s.Expiry) {
				s.Expiry = t.Expiry
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// StoredAccountTokens lists the Account Tokens of the local user at the
// Company whose issuer is issuer, without their values, in order of account
// label. Expired tokens are left out. It sends no request.
func (a *Agent) StoredAccountTokens(ctx context.Context, user, issuer string) ([]*AccountToken, error) {
	keys, err := a.store.List(ctx, keystore.KindAccountToken, user, issuer)
	if err != nil {
		return nil, fmt.Errorf("poppy: listing Account Tokens: %w", err)
	}
	now := a.clock.Now()
	out := make([]*AccountToken, 0, len(keys))
	for _, k := range keys {
		b, err := a.store.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("poppy: reading Account Token: %w", err)
		}
		var rec accountRecord
		if json.Unmarshal(b, &rec) != nil || rec.Token == "" || rec.expired(now) {
			continue
		}
		out = append(out, &AccountToken{Account: k.ID, Scopes: strings.Fields(rec.Scope), Expiry: rec.Expiry})
	}
	return out, nil
}
