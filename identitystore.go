package poppy

// The agent's own signing keys in the keystore (spec 4.1).
//
// A script or a command-line agent has nowhere of its own to keep its
// private keys, so they live in the keystore beside the User IDs and tokens,
// as a record of kind keystore.KindAgentKey: a secret kind, which stores
// that write to disk protect, and which sqlitestore seals when it has a
// Sealer. The record holds the private JWKs of the key set, the signing key
// first. It is read and written with one atomic Update, so two processes
// starting at once create one key set, not two.
//
// Where the client_id and the JWKS live. A Company fetches the agent's
// client metadata document from its client_id URL and the public keys from
// its jwks_uri (spec 4.1), so they must be reachable over HTTPS by every
// Company the agent signs in to. A script has no server of its own: its
// operator serves them, at a URL they control, with [Identity.Handler]
// (the poppy command's "serve-identity" does exactly that), for example
// https://agent.example/poppy/agent.json and .../jwks.json behind the
// operator's TLS reverse proxy. The script and that server load the same
// keys from the same keystore with [LoadSigningKeys]; after
// [RotateSigningKeys], the server publishes the new key and keeps the
// previous one published, so assertions signed just before the rotation
// still verify at a Company that cached the old set.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/poppyproto/poppy/keystore"
)

// The key of the signing-key record: the keys belong to the agent, not to
// a User at a Company.
const (
	agentKeyUser   = "poppy:agent"
	agentKeyIssuer = "poppy:agent"
	// maxStoredKeys bounds the key set kept: the signing key and the one
	// it replaced.
	maxStoredKeys = 2
)

// SigningKeysKey returns the keystore key under which LoadSigningKeys and
// RotateSigningKeys keep the key set named name ("" means "default").
func SigningKeysKey(name string) keystore.Key {
	if name == "" {
		name = "default"
	}
	return keystore.Key{Kind: keystore.KindAgentKey, User: agentKeyUser, Issuer: agentKeyIssuer, ID: name}
}

type storedKeySet struct {
	Keys []json.RawMessage `json:"keys"` // private JWKs, the signing key first
}

// LoadSigningKeys returns the agent's signing keys kept in store under name
// ("" means "default"), the signing key first, creating and storing a new
// P-256 key the first time. Pass them as IdentityConfig.Keys. Every process
// that loads the same name from the same store gets the same keys.
func LoadSigningKeys(ctx context.Context, store keystore.Store, name string) ([]*SigningKey, error) {
	var keys []*SigningKey
	err := store.Update(ctx, SigningKeysKey(name), func(cur []byte) ([]byte, error) {
		if cur != nil {
			var err error
			keys, err = decodeKeySet(cur)
			return cur, err
		}
		k, err := GenerateSigningKey()
		if err != nil {
			return nil, err
		}
		keys = []*SigningKey{k}
		return encodeKeySet(keys)
	})
	if err != nil {
		return nil, fmt.Errorf("poppy: loading signing keys: %w", err)
	}
	return keys, nil
}

// RotateSigningKeys makes a new signing key for the key set named name and
// stores it first, keeping the previous signing key second, so that it stays
// published in the JWKS; any older key is dropped. It returns the new set,
// to give to [Identity.Rotate]. A Company that cached the old JWKS refetches
// it when an assertion names a key it doesn't know (spec 4.1).
func RotateSigningKeys(ctx context.Context, store keystore.Store, name string) ([]*SigningKey, error) {
	var keys []*SigningKey
	err := store.Update(ctx, SigningKeysKey(name), func(cur []byte) ([]byte, error) {
		var old []*SigningKey
		if cur != nil {
			var err error
			if old, err = decodeKeySet(cur); err != nil {
				return nil, err
			}
		}
		k, err := GenerateSigningKey()
		if err != nil {
			return nil, err
		}
		keys = append([]*SigningKey{k}, old...)
		if len(keys) > maxStoredKeys {
			keys = keys[:maxStoredKeys]
		}
		return encodeKeySet(keys)
	})
	if err != nil {
		return nil, fmt.Errorf("poppy: rotating signing keys: %w", err)
	}
	return keys, nil
}

func encodeKeySet(keys []*SigningKey) ([]byte, error) {
	var set storedKeySet
	for _, k := range keys {
		b, err := k.MarshalPrivateJWK()
		if err != nil {
			return nil, err
		}
		set.Keys = append(set.Keys, b)
	}
	return json.Marshal(&set)
}

var errBadKeySet = errors.New("the stored signing-key record is unreadable")

func decodeKeySet(b []byte) ([]*SigningKey, error) {
	var set storedKeySet
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		return nil, errBadKeySet
	}
	keys := make([]*SigningKey, 0, len(set.Keys))
	for _, raw := range set.Keys {
		k, err := ParseSigningKey(raw)
		if err != nil {
			return nil, errBadKeySet
		}
		keys = append(keys, k)
	}
	return keys, nil
}
