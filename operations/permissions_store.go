package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/keystore"
)

// Standing permissions are kept in the keystore under (local User, issuer,
// permission ID), so that every process and replica sharing the store
// applies, lists and revokes the same ones.

func (c *Client) store() keystore.Store { return c.sess.Company().Agent().Store() }

func (c *Client) permKey(id string) keystore.Key {
	return keystore.Key{Kind: keystore.KindPermission, User: c.sess.User(), Issuer: c.sess.Company().Issuer(), ID: id}
}

// Grant stores a standing permission the User gave, for this Client's User
// and Company, and returns it with its ID, Issuer and Granted filled in.
// It needs an Account, an Action, an Expires and at least one Term.
func (c *Client) Grant(ctx context.Context, p Permission) (Permission, error) {
	if p.Issuer == "" {
		p.Issuer = c.sess.Company().Issuer()
	}
	switch {
	case p.Issuer != c.sess.Company().Issuer():
		return p, errors.New("operations: Grant: the permission is for another Company")
	case p.Account == "":
		return p, errors.New("operations: Grant: a standing permission names the account (A-34)")
	case p.Action.Channel == "":
		return p, errors.New("operations: Grant: a standing permission names the action")
	case p.Expires.IsZero():
		return p, errors.New("operations: Grant: a standing permission has an expiry")
	case len(p.Terms) == 0:
		return p, errors.New("operations: Grant: a standing permission covers terms")
	}
	for _, t := range p.Terms {
		if len(t.Path) == 0 {
			return p, errors.New("operations: Grant: a term has no path")
		}
		name := clean(t.Path.String(), 100)
		switch t.Op {
		case OpAny:
		case OpAtMost, OpAtLeast:
			if len(t.Values) != 1 {
				return p, fmt.Errorf("operations: Grant: term %q needs exactly one value", name)
			}
			if _, ok := boundOf(t.Values[0]); !ok {
				return p, fmt.Errorf("operations: Grant: term %q: the bound is not a decimal number (digits, an optional \"-\" and fraction, such as \"20.00\")", name)
			}
		case OpEqual, OpIn:
			if t.Op == OpEqual && len(t.Values) != 1 {
				return p, fmt.Errorf("operations: Grant: term %q needs exactly one value", name)
			}
			if len(t.Values) == 0 {
				return p, fmt.Errorf("operations: Grant: term %q needs values", name)
			}
			for _, v := range t.Values {
				if _, amb, err := readValue(v); err != nil || amb != nil {
					return p, fmt.Errorf("operations: Grant: term %q: a value is not JSON that reads one way", name)
				}
			}
		default:
			return p, fmt.Errorf("operations: Grant: term %q: unknown predicate %q", name, clean(string(t.Op), 40))
		}
	}
	if p.ID == "" {
		p.ID = "perm_" + jose.RandomID(12)
	}
	if p.Granted.IsZero() {
		p.Granted = c.clock.Now()
	}
	b, err := json.Marshal(p)
	if err != nil {
		return p, fmt.Errorf("operations: Grant: %w", err)
	}
	if err := c.store().Update(ctx, c.permKey(p.ID), func([]byte) ([]byte, error) { return b, nil }); err != nil {
		return p, fmt.Errorf("operations: storing the permission: %w", err)
	}
	return p, nil
}

// Permissions lists the standing permissions of this Client's User at its
// Company, expired ones included, in order of ID.
func (c *Client) Permissions(ctx context.Context) ([]Permission, error) {
	st := c.store()
	keys, err := st.List(ctx, keystore.KindPermission, c.sess.User(), c.sess.Company().Issuer())
	if err != nil {
		return nil, fmt.Errorf("operations: listing permissions: %w", err)
	}
	var out []Permission
	for _, k := range keys {
		b, err := st.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("operations: reading a permission: %w", err)
		}
		var p Permission
		if json.Unmarshal(b, &p) != nil || p.ID != k.ID {
			continue // unreadable: never applied
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Permission) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out, nil
}

// Revoke deletes a standing permission. Revoking one that doesn't exist is
// not an error.
func (c *Client) Revoke(ctx context.Context, id string) error {
	if err := c.store().Update(ctx, c.permKey(id), func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		return fmt.Errorf("operations: revoking the permission: %w", err)
	}
	return nil
}
