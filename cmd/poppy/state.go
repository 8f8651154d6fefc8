package main

// What the command keeps in the keystore besides what the SDK keeps: the
// identity's configuration (poppy init) and the Companies each profile has
// used (for poppy status). Both are plain records under the command's own
// kinds; the signing keys are the SDK's (poppy.LoadSigningKeys).

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/keyring"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

const (
	kindCLIConfig    keystore.Kind = "cli_config"
	kindCLICompany   keystore.Kind = "cli_company"
	kindCLISealKey   keystore.Kind = "cli_seal_key"
	cliUser                        = "poppy:cli"
	cliIssuer                      = "poppy:cli"
	signingKeysName                = "poppy-cli"
	defaultStateFile               = "keystore.db"
)

// openStore opens the SQLite keystore at path (default under
// os.UserConfigDir), sealed with a key from the OS keyring when
// useKeyring is set. Its directory must be writable by the OS user alone
// (see privateStateDir); warn reports a repair.
func openStore(path string, useKeyring bool, warn func(string)) (keystore.Store, func(), error) {
	if path == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return nil, nil, fmt.Errorf("poppy: no config directory for the keystore (use --state): %w", err)
		}
		path = filepath.Join(dir, "poppy", defaultStateFile)
		if err := privateStateDir(filepath.Dir(path), true, warn); err != nil {
			return nil, nil, err
		}
	} else if err := privateStateDir(filepath.Dir(path), false, warn); err != nil {
		return nil, nil, err
	}
	var opts sqlitestore.Options
	if useKeyring {
		sealer, err := keyringSealer()
		if err != nil {
			return nil, nil, err
		}
		opts.Sealer = sealer
	}
	s, err := sqlitestore.Open(path, &opts)
	if err != nil {
		return nil, nil, err
	}
	return sealHint{s}, func() { _ = s.Close() }, nil
}

// keyringSealer returns an AES-GCM sealer whose key is kept in the OS
// keyring, created the first time.
func keyringSealer() (keystore.Sealer, error) {
	kr, err := keyring.New(nil)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := kr.Ping(ctx); err != nil {
		return nil, fmt.Errorf("poppy: --keyring: the OS keyring does not answer: %w", err)
	}
	var key []byte
	err = kr.Update(ctx, keystore.Key{Kind: kindCLISealKey, User: cliUser, Issuer: cliIssuer}, func(cur []byte) ([]byte, error) {
		if len(cur) == 32 {
			key = cur
			return cur, nil
		}
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		return key, nil
	})
	if err != nil {
		return nil, fmt.Errorf("poppy: --keyring: %w", err)
	}
	return keystore.NewAESGCMSealer(key)
}

// identityConfig is what poppy init stores.
type identityConfig struct {
	BaseURL string `json:"base_url"`
	Name    string `json:"client_name,omitempty"`
	LogoURI string `json:"logo_uri,omitempty"`
}

func (c *identityConfig) clientID() string    { return c.BaseURL + "agent.json" }
func (c *identityConfig) jwksURI() string     { return c.BaseURL + "jwks.json" }
func (c *identityConfig) redirectURI() string { return c.BaseURL + "callback" }

func (c *identityConfig) identity(keys []*poppy.SigningKey) (*poppy.Identity, error) {
	return poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     c.clientID(),
		ClientName:   c.Name,
		LogoURI:      c.LogoURI,
		JWKSURI:      c.jwksURI(),
		RedirectURIs: []string{c.redirectURI()},
		Keys:         keys,
		// The command approves operations with the User (cmd_ops.go).
		Extensions: map[string]string{"operations": "1"},
	})
}

// normaliseBaseURL checks a --base-url and gives it a trailing slash.
func normaliseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", usageError{err: errors.New("--base-url must be an https:// URL without query or fragment, such as https://agent.example/poppy/")}
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

var configKey = keystore.Key{Kind: kindCLIConfig, User: cliUser, Issuer: cliIssuer, ID: "identity"}

func readIdentityConfig(ctx context.Context, store keystore.Store) (*identityConfig, error) {
	b, err := store.Get(ctx, configKey)
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, errNotInitialised
	}
	if err != nil {
		return nil, fmt.Errorf("poppy: reading the identity: %w", err)
	}
	var c identityConfig
	if err := json.Unmarshal(b, &c); err != nil || c.BaseURL == "" {
		return nil, errors.New("poppy: the stored identity is unreadable: run poppy init again")
	}
	return &c, nil
}

func writeIdentityConfig(ctx context.Context, store keystore.Store, c *identityConfig) error {
	b, _ := json.Marshal(c)
	return store.Update(ctx, configKey, func([]byte) ([]byte, error) { return b, nil })
}

// companyRecord is one Company a profile has used.
type companyRecord struct {
	Profile string `json:"profile"`
	Domain  string `json:"domain"`
	Issuer  string `json:"issuer"`
	Name    string `json:"name"`
}

func companyKey(profile, domain string) keystore.Key {
	id, _ := json.Marshal([2]string{profile, domain})
	return keystore.Key{Kind: kindCLICompany, User: cliUser, Issuer: cliIssuer, ID: string(id)}
}

func rememberCompany(ctx context.Context, store keystore.Store, profile string, c *poppy.Company) error {
	rec := companyRecord{Profile: profile, Domain: c.Domain(), Issuer: c.Issuer(), Name: c.Name()}
	b, _ := json.Marshal(&rec)
	return store.Update(ctx, companyKey(profile, c.Domain()), func(cur []byte) ([]byte, error) {
		if string(cur) == string(b) {
			return cur, nil
		}
		return b, nil
	})
}

func knownCompanies(ctx context.Context, store keystore.Store) ([]companyRecord, error) {
	keys, err := store.List(ctx, kindCLICompany, cliUser, cliIssuer)
	if err != nil {
		return nil, err
	}
	var out []companyRecord
	for _, k := range keys {
		b, err := store.Get(ctx, k)
		if err != nil {
			continue
		}
		var r companyRecord
		if json.Unmarshal(b, &r) == nil && r.Issuer != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

// sealHint says what to do when a sealed record can't be opened: the
// keystore was made with --keyring and opened without it, or the other way.
type sealHint struct{ keystore.Store }

func (s sealHint) wrap(err error) error {
	if errors.Is(err, keystore.ErrCannotOpen) {
		return &hintError{err: err, hint: "this keystore's secrets are sealed with --keyring: always open it with --keyring (or never, if it was made without)", code: exitError}
	}
	return err
}

func (s sealHint) Get(ctx context.Context, key keystore.Key) ([]byte, error) {
	b, err := s.Store.Get(ctx, key)
	return b, s.wrap(err)
}

func (s sealHint) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	return s.wrap(s.Store.Update(ctx, key, fn))
}
