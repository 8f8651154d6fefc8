package poppy

// Agent identity (spec 4.1) and User IDs (spec 4.2).
//
// An Identity is the agent's client_id URL, its client metadata document and
// the ES256 keys it signs client assertions and Session assertions with. Its
// Handler serves the metadata document and the public JWKS over HTTPS, with
// caching headers, at the paths of client_id and jwks_uri. Keys rotate by
// publishing a new key beside the old one before signing with it: the first
// key of the set signs, every key is published.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/keystore"
)

// SigningKey is an ES256 key the agent signs assertions with and publishes
// in its JWKS. Its private part never appears in formatted output or logs.
type SigningKey struct {
	kid    string
	priv   *ecdsa.PrivateKey
	pub    []byte // public JWK JSON with kid, alg, use
	signer *jose.Signer
}

// GenerateSigningKey returns a new P-256 signing key. Its key ID is its
// RFC 7638 thumbprint.
func GenerateSigningKey() (*SigningKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("poppy: generating key: %w", err)
	}
	return NewSigningKey(priv, "")
}

// NewSigningKey wraps an existing P-256 private key. kid "" means the key's
// RFC 7638 thumbprint.
func NewSigningKey(priv *ecdsa.PrivateKey, kid string) (*SigningKey, error) {
	if priv == nil || priv.Curve != elliptic.P256() {
		return nil, configError("signing key must be an ECDSA P-256 key (ES256)")
	}
	if kid == "" {
		tp, err := jose.Thumbprint(&priv.PublicKey)
		if err != nil {
			return nil, configError("signing key: %v", err)
		}
		kid = tp
	}
	pub, err := jose.PublicJWKJSON(&priv.PublicKey, "kid", kid, "alg", "ES256", "use", "sig")
	if err != nil {
		return nil, configError("signing key: %v", err)
	}
	s, err := jose.NewSigner(priv, jose.AssertionHeader(kid, "JWT"))
	if err != nil {
		return nil, configError("signing key: %v", err)
	}
	return &SigningKey{kid: kid, priv: priv, pub: pub, signer: s}, nil
}

// ParseSigningKey reads a private P-256 JWK, as written by
// [SigningKey.MarshalPrivateJWK].
func ParseSigningKey(privateJWK []byte) (*SigningKey, error) {
	k, err := jwk.ParseKey(privateJWK)
	if err != nil {
		return nil, configError("ParseSigningKey: not a JWK")
	}
	var priv ecdsa.PrivateKey
	if err := jwk.Export(k, &priv); err != nil {
		return nil, configError("ParseSigningKey: not an EC private key")
	}
	kid, _ := k.KeyID()
	return NewSigningKey(&priv, kid)
}

// KeyID returns the key's kid.
func (k *SigningKey) KeyID() string { return k.kid }

// PublicJWK returns the public JWK, as published in the JWKS.
func (k *SigningKey) PublicJWK() []byte { return append([]byte(nil), k.pub...) }

// MarshalPrivateJWK returns the private key as a JWK, for the application to
// keep as a secret. It is the only way the private part leaves the value.
func (k *SigningKey) MarshalPrivateJWK() ([]byte, error) {
	jk, err := jwk.Import(k.priv)
	if err != nil {
		return nil, fmt.Errorf("poppy: exporting key: %w", err)
	}
	if err := jk.Set(jwk.KeyIDKey, k.kid); err != nil {
		return nil, err
	}
	return json.Marshal(jk)
}

// String describes the key without its private part.
func (k *SigningKey) String() string { return "poppy.SigningKey(kid=" + k.kid + ")" }

// GoString is String, so %#v shows no private part.
func (k *SigningKey) GoString() string { return k.String() }

// Format writes String for every verb.
func (k *SigningKey) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue logs the kid only.
func (k *SigningKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// IdentityConfig describes a Personal Agent's identity (spec 4.1).
type IdentityConfig struct {
	// ClientID is the HTTPS URL of the client metadata document.
	ClientID string
	// ClientName and LogoURI are shown to Users on the Company's consent pages.
	ClientName string
	LogoURI    string
	// JWKSURI is where the public keys are published: an HTTPS URL on the
	// client_id host. Empty means "jwks.json" beside the metadata document.
	JWKSURI string
	// RedirectURIs lists where Direct Sign-In may return the User: HTTPS
	// URLs on the client_id host.
	RedirectURIs []string
	// Keys sign client, Session and browser assertions. Keys[0] signs; all
	// are published, so a new key can be published before it signs.
	Keys []*SigningKey
	// Extensions lists the extensions the agent supports, name → major
	// version (spec 3.3). Plain names are for extensions defined with the
	// protocol; others are named with a domain, such as "agent.example/x".
	Extensions map[string]string
}

// Identity is a Personal Agent's identity: its client_id, metadata document
// and signing keys. It is safe for concurrent use.
type Identity struct {
	clientID string
	cidURL   *url.URL
	jwksURL  *url.URL
	redirect []string
	name     string
	logo     string
	exts     map[string]string
	keys     atomic.Pointer[keySet]
}

type keySet struct {
	keys []*SigningKey
	jwks []byte
	meta []byte
	etag string
}

// knownPlainExtensions are the extensions defined with the protocol, the
// only ones with plain names (spec 3.3).
var knownPlainExtensions = map[string]bool{"operations": true}

var extNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+/[A-Za-z0-9._~-]+$`)

// NewIdentity checks cfg and returns the Identity it describes.
func NewIdentity(cfg IdentityConfig) (*Identity, error) {
	// PA-4.1-01
	cid, err := url.Parse(cfg.ClientID)
	if err != nil || cid.Host == "" || cid.Scheme == "" || cid.RawQuery != "" || cid.Fragment != "" {
		return nil, configError("client_id must be an HTTPS URL without query or fragment")
	}
	id := &Identity{clientID: cfg.ClientID, cidURL: cid, name: cfg.ClientName, logo: cfg.LogoURI}
	jwksRaw := cfg.JWKSURI
	if jwksRaw == "" {
		jwksRaw = cid.ResolveReference(&url.URL{Path: "jwks.json"}).String()
	}
	if id.jwksURL, err = url.Parse(jwksRaw); err != nil {
		return nil, configError("jwks_uri is not a URL")
	}
	for _, r := range cfg.RedirectURIs {
		if _, err := url.Parse(r); err != nil {
			return nil, configError("redirect_uri is not a URL")
		}
		id.redirect = append(id.redirect, r)
	}
	if err := id.checkURLs(false); err != nil {
		// A loopback identity is allowed here; NewAgent accepts it only
		// with UnsafeAllowLoopbackHTTP.
		if err2 := id.checkURLs(true); err2 != nil {
			return nil, err
		}
	}
	id.exts = map[string]string{}
	for name, v := range cfg.Extensions {
		// PA-3.3-01
		if !knownPlainExtensions[name] && !extNameRE.MatchString(name) {
			return nil, configError("extension %q: names other than the protocol's own must start with a domain, such as agent.example/%s", name, name)
		}
		if v == "" {
			return nil, configError("extension %q has no version", name)
		}
		id.exts[name] = v
	}
	if err := id.Rotate(cfg.Keys...); err != nil {
		return nil, err
	}
	return id, nil
}

// checkURLs applies spec 4.1: client_id, jwks_uri and redirect_uris are
// HTTPS, and the last two are on the client_id host (A-02: the exact host).
func (id *Identity) checkURLs(allowLoopback bool) error {
	if err := checkURL(id.cidURL, allowLoopback); err != nil {
		return about("client_id", err)
	}
	// PA-4.1-03
	if err := checkURL(id.jwksURL, allowLoopback); err != nil {
		return about("jwks_uri", err)
	}
	if !strings.EqualFold(id.jwksURL.Host, id.cidURL.Host) {
		return configError("jwks_uri must be on the client_id host %q", id.cidURL.Host)
	}
	// PA-4.1-04
	for _, r := range id.redirect {
		u, _ := url.Parse(r)
		if err := checkURL(u, allowLoopback); err != nil {
			return about("redirect_uri", err)
		}
		if !strings.EqualFold(u.Host, id.cidURL.Host) {
			return configError("redirect_uri must be on the client_id host %q", id.cidURL.Host)
		}
	}
	return nil
}

// Rotate replaces the signing keys: keys[0] signs from now on, and every key
// is published. To rotate without failed verifications, publish the new key
// second, wait for Companies' caches of the JWKS to expire, then make it
// first, and later drop the old one.
func (id *Identity) Rotate(keys ...*SigningKey) error {
	if len(keys) == 0 {
		return configError("identity needs at least one signing key")
	}
	seen := map[string]bool{}
	var jwks []byte
	jwks = append(jwks, `{"keys":[`...)
	for i, k := range keys {
		if k == nil {
			return configError("nil signing key")
		}
		if seen[k.kid] {
			return configError("two signing keys share kid %q", k.kid)
		}
		seen[k.kid] = true
		if i > 0 {
			jwks = append(jwks, ',')
		}
		jwks = append(jwks, k.pub...)
	}
	jwks = append(jwks, "]}"...)
	ks := &keySet{keys: append([]*SigningKey(nil), keys...), jwks: jwks}
	ks.meta = id.metadataJSON()
	ks.etag = `"` + jose.Hash(string(ks.meta) + string(ks.jwks))[:16] + `"`
	id.keys.Store(ks)
	return nil
}

// ClientID returns the client_id URL.
func (id *Identity) ClientID() string { return id.clientID }

// JWKSURI returns the jwks_uri.
func (id *Identity) JWKSURI() string { return id.jwksURL.String() }

// RedirectURIs returns the registered redirect URIs.
func (id *Identity) RedirectURIs() []string { return append([]string(nil), id.redirect...) }

// Extensions returns the extensions the agent lists, name → version.
func (id *Identity) Extensions() map[string]string {
	m := make(map[string]string, len(id.exts))
	for k, v := range id.exts {
		m[k] = v
	}
	return m
}

// Supports reports whether the agent lists extension name at version.
func (id *Identity) Supports(name, version string) bool { return id.exts[name] == version }

// Metadata returns the client metadata document (spec 4.1).
func (id *Identity) Metadata() []byte { return append([]byte(nil), id.keys.Load().meta...) }

// JWKS returns the public key set. It holds only public keys (PA-4.1-05).
func (id *Identity) JWKS() []byte { return append([]byte(nil), id.keys.Load().jwks...) }

func (id *Identity) metadataJSON() []byte {
	type ext struct {
		Version string `json:"version"`
	}
	doc := struct {
		ClientID                string         `json:"client_id"`
		ClientName              string         `json:"client_name,omitempty"`
		LogoURI                 string         `json:"logo_uri,omitempty"`
		JWKSURI                 string         `json:"jwks_uri"`
		RedirectURIs            []string       `json:"redirect_uris"`
		TokenEndpointAuthMethod string         `json:"token_endpoint_auth_method"`
		GrantTypes              []string       `json:"grant_types"`
		Extensions              map[string]ext `json:"extensions,omitempty"`
	}{
		ClientID:                id.clientID, // PA-4.1-02
		ClientName:              id.name,
		LogoURI:                 id.logo,
		JWKSURI:                 id.jwksURL.String(),
		RedirectURIs:            append([]string{}, id.redirect...),
		TokenEndpointAuthMethod: "private_key_jwt", // PA-4.1-06
		GrantTypes: []string{"urn:ietf:params:oauth:grant-type:jwt-bearer", "refresh_token",
			"authorization_code", "urn:ietf:params:oauth:grant-type:device_code"},
	}
	if len(id.exts) > 0 {
		doc.Extensions = map[string]ext{}
		for k, v := range id.exts {
			doc.Extensions[k] = ext{Version: v} // PA-3.3-03
		}
	}
	b, _ := json.Marshal(doc)
	return b
}

// Handler serves the client metadata document at the path of client_id and
// the JWKS at the path of jwks_uri, each with Cache-Control and an ETag.
// Mount it on the client_id host. Requests for other paths are passed to
// next, or answered 404 when next is nil; the sign-in callback is added there
// by package signin.
func (id *Identity) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks := id.keys.Load()
		var body []byte
		switch r.URL.Path {
		case id.cidURL.Path:
			body = ks.meta
		case id.jwksURL.Path:
			body = ks.jwks
		default:
			if next != nil {
				next.ServeHTTP(w, r)
				return
			}
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "public, max-age=300")
		h.Set("ETag", ks.etag)
		if r.Header.Get("If-None-Match") == ks.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}

const assertionLifetime = jose.AssertionLifetime

// clientAssertion returns a fresh private_key_jwt client assertion
// (jose.ClientAssertion: RFC 7523 section 3; PA-4.1-07, PA-4.1-09): aud the
// token endpoint.
func (id *Identity) clientAssertion(aud string, now time.Time) (string, error) {
	return jose.ClientAssertion(id.keys.Load().keys[0].signer, id.clientID, aud, now)
}

// sessionAssertion returns a fresh Session assertion (spec 4.2,
// jose.SessionAssertion): iss the client_id, sub the User ID, aud the token
// endpoint as a single string.
func (id *Identity) sessionAssertion(tokenEndpoint, userID string, now time.Time) (string, error) {
	return jose.SessionAssertion(id.keys.Load().keys[0].signer, id.clientID, userID, tokenEndpoint, now)
}

// BrowserAssertionType is the typ header of a browser assertion (spec 5
// step 1).
const BrowserAssertionType = jose.BrowserAssertionType

// BrowserAssertion is a signed browser assertion (spec 5 step 1), which
// joins a browser the agent controls to a Session. The signed JWT is a
// secret for its 60 seconds: String, GoString, Format and LogValue never
// show it; only Value does, for the join page (package browser).
type BrowserAssertion struct {
	value string

	// Endpoint is the aud: the Company's web.browser_session_endpoint.
	Endpoint string
	// SessionID is the session_id of the Session the browser joins.
	SessionID string
	// ReturnTo is the page the Company opens after the join.
	ReturnTo string
	// IssuedAt and ExpiresAt are iat and exp; they are 60 s apart.
	IssuedAt, ExpiresAt time.Time
}

// Value returns the compact JWT. Hand it only to a browser the agent
// controls (PA-5-11).
func (a *BrowserAssertion) Value() string { return a.value }

// String describes the assertion without its value.
func (a *BrowserAssertion) String() string {
	return "poppy.BrowserAssertion(aud=" + a.Endpoint + ", session_id=" + a.SessionID + ", redacted)"
}

// GoString is String.
func (a *BrowserAssertion) GoString() string { return a.String() }

// Format writes String for every verb.
func (a *BrowserAssertion) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.String())) }

// LogValue logs String.
func (a *BrowserAssertion) LogValue() slog.Value { return slog.StringValue(a.String()) }

// SignBrowserAssertion signs a browser assertion that joins a browser to
// the Session and then opens returnTo (spec 5 step 1): typ
// poppy-browser+jwt, signed with the agent's current jwks_uri key
// (PA-5-03); iss the client_id, sub the User ID, iat, a 128-bit jti
// (PA-5-04); aud the Company's web.browser_session_endpoint (PA-5-05);
// session_id the Session's ID (PA-5-06); exp 60 s after iat, the most the
// spec allows, so that a slow browser start doesn't expire it (PA-5-08).
//
// returnTo is checked with Company.CheckReturnTo before anything is signed
// (PA-5-07): the error then wraps ErrReturnTo. A Company without the
// endpoint gets ErrNoBrowserSessionEndpoint. No other claim can be chosen:
// this is the only JWT the agent's key signs for a caller.
//
// Hand the assertion only to a browser the agent controls (PA-5-11);
// package browser does the whole join.
func (s *Session) SignBrowserAssertion(returnTo string) (*BrowserAssertion, error) {
	if s == nil {
		return nil, ErrNoSession
	}
	c := s.company
	endpoint, err := c.BrowserSessionEndpoint()
	if err != nil {
		return nil, err
	}
	if err := c.CheckReturnTo(returnTo); err != nil {
		return nil, err // PA-5-07: nothing signed
	}
	sid := s.ID()
	if sid == "" {
		return nil, errors.New("poppy: the Session has no session_id yet")
	}
	a := s.agent
	now := a.clock.Now()
	v, err := a.id.browserAssertion(endpoint, s.userID, sid, returnTo, now)
	if err != nil {
		return nil, fmt.Errorf("poppy: signing the browser assertion: %w", err)
	}
	return &BrowserAssertion{value: v, Endpoint: endpoint, SessionID: sid, ReturnTo: returnTo,
		IssuedAt: time.Unix(now.Unix(), 0), ExpiresAt: time.Unix(now.Add(assertionLifetime).Unix(), 0)}, nil
}

// browserAssertion signs a browser assertion (spec 5 step 1,
// jose.BrowserAssertion) with the current signing key, typ
// poppy-browser+jwt (PA-5-03..08).
func (id *Identity) browserAssertion(endpoint, userID, sessionID, returnTo string, now time.Time) (string, error) {
	k := id.keys.Load().keys[0]
	return jose.BrowserAssertion(k.priv, k.kid, id.clientID, userID, endpoint, sessionID, returnTo, now)
}

// userIDPrefix marks User IDs the SDK makes.
const userIDPrefix = "usr_"

// newUserID returns a fresh User ID: 128 random bits, never derived from
// anything about the User (PA-4.2-04).
func newUserID() string { return userIDPrefix + jose.RandomID(16) }

// UserID returns the User ID of the local user at the issuer, creating and
// storing it the first time (spec 4.2: one per User per Company, stable,
// opaque, never derived from personal information).
func (a *Agent) UserID(ctx context.Context, user, issuer string) (string, error) {
	if user == "" {
		return "", configError("UserID: empty user")
	}
	if issuer == "" {
		return "", configError("UserID: empty issuer")
	}
	key := keystore.Key{Kind: keystore.KindUserID, User: user, Issuer: issuer}
	if b, err := a.store.Get(ctx, key); err == nil && len(b) > 0 {
		return string(b), nil
	} else if err != nil && !errors.Is(err, keystore.ErrNotFound) {
		return "", fmt.Errorf("poppy: reading User ID: %w", err)
	}
	var out string
	err := a.store.Update(ctx, key, func(cur []byte) ([]byte, error) {
		if len(cur) > 0 {
			out = string(cur)
			return cur, nil
		}
		out = newUserID()
		return []byte(out), nil
	})
	if err != nil {
		return "", fmt.Errorf("poppy: storing User ID: %w", err)
	}
	return out, nil
}

// String describes the identity by its client_id and key IDs, never a key.
func (id *Identity) String() string {
	if id == nil {
		return "poppy.Identity(nil)"
	}
	var kids []string
	if ks := id.keys.Load(); ks != nil {
		for _, k := range ks.keys {
			kids = append(kids, k.kid)
		}
	}
	return fmt.Sprintf("poppy.Identity(%s, keys %q)", id.clientID, kids)
}

// GoString is String.
func (id *Identity) GoString() string { return id.String() }

// Format writes String for every verb.
func (id *Identity) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(id.String())) }

// LogValue logs String.
func (id *Identity) LogValue() slog.Value { return slog.StringValue(id.String()) }
