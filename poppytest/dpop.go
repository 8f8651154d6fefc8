package poppytest

// DPoP (spec 4.3, RFC 9449). A proof is parsed strictly by parseProof
// (fuzzed), its key is parsed once per distinct jwk and cached with its
// thumbprint, and the signature is checked with jwx's compact fast path, so
// a proof costs one ES256 verification plus map lookups.
//
// Checks, in order: one DPoP header; typ "dpop+jwt"; alg ES256; a public
// EC P-256 jwk; jti, htm, htu, iat claims; signature with the header key;
// iat within ±60 s of the Clock; jti not accepted within the window; htm and
// htu (no query or fragment); ath absent at the token endpoint and equal to
// the token hash elsewhere; the nonce when RequireNonce. Key binding to the
// token is checked by the caller.

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// proofWindow is how far a proof's iat may be from the Clock, and how long a
// proof jti is remembered.
const proofWindow = 60 * time.Second

// nonceHistory is how many nonces (the current one included) a host accepts.
const nonceHistory = 5

// parsedProof is a structurally valid DPoP proof.
type parsedProof struct {
	*compactJWS
	key            jwk.Key
	jkt            string
	jti, htm, htu  string
	iat            float64
	ath, nonce     string
	hasAth, hasNon bool
}

// proofError is a rejected proof; rule, when set, is the PA rule the client
// broke by sending it.
type proofError struct {
	msg  string
	rule string
}

func (e *proofError) Error() string { return e.msg }

func badProof(rule, format string, args ...any) *proofError {
	return &proofError{msg: fmt.Sprintf(format, args...), rule: rule}
}

// keyCacher caches parsed proof keys; nil disables caching.
type keyCacher interface {
	lookupKey(raw string) (cachedKey, bool)
	storeKey(raw string, k cachedKey)
}

// parseProof parses a DPoP proof and checks its shape: everything that
// doesn't depend on the request, the time or the signature.
func parseProof(s string, cache keyCacher) (*parsedProof, *proofError) {
	j, err := splitJWS(s)
	if err != nil {
		return nil, badProof("", "proof is not a compact JWS: %v", err)
	}
	p := &parsedProof{compactJWS: j}
	if typ, _ := str(j.header, "typ"); typ != "dpop+jwt" {
		return nil, badProof("PA-4.3-06", "proof typ is %q, not dpop+jwt", typ)
	}
	alg, _ := str(j.header, "alg")
	switch {
	case alg == "ES256":
	case alg == "" || strings.EqualFold(alg, "none") || strings.HasPrefix(alg, "HS"):
		return nil, badProof("PA-4.3-06", "proof alg %q is not an asymmetric algorithm", alg)
	default:
		return nil, badProof("", "proof alg %q is not in dpop_signing_alg_values_supported [ES256]", alg)
	}
	jwkMap, ok := j.header["jwk"].(map[string]any)
	if !ok {
		return nil, badProof("PA-4.3-06", "proof header has no jwk object")
	}
	if hasPrivateMembers(jwkMap) {
		return nil, badProof("PA-4.3-03", "proof header jwk contains private key members")
	}
	if kty, _ := str(jwkMap, "kty"); kty != "EC" {
		return nil, badProof("PA-4.3-06", "proof jwk kty %q does not fit ES256", kty)
	}
	if crv, _ := str(jwkMap, "crv"); crv != "P-256" {
		return nil, badProof("PA-4.3-06", "proof jwk crv %q does not fit ES256", crv)
	}
	raw, err := json.Marshal(jwkMap) // sorted keys: a stable cache key
	if err != nil {
		return nil, badProof("", "proof jwk: %v", err)
	}
	ck, ok := lookup(cache, string(raw))
	if !ok {
		key, err := jwk.ParseKey(raw)
		if err != nil {
			return nil, badProof("", "proof jwk is not a usable key")
		}
		if priv, err := jwk.IsPrivateKey(key); err != nil || priv {
			return nil, badProof("PA-4.3-03", "proof jwk is not a public key")
		}
		tp, err := thumbprint(key)
		if err != nil {
			return nil, badProof("", "proof jwk has no thumbprint")
		}
		ck = cachedKey{key: key, jkt: tp}
		if cache != nil {
			cache.storeKey(string(raw), ck)
		}
	}
	p.key, p.jkt = ck.key, ck.jkt

	c := j.claims
	if p.jti, _ = str(c, "jti"); p.jti == "" {
		return nil, badProof("PA-4.3-05", "proof has no jti")
	}
	if p.htm, _ = str(c, "htm"); p.htm == "" {
		return nil, badProof("PA-4.3-07", "proof has no htm")
	}
	if p.htu, _ = str(c, "htu"); p.htu == "" {
		return nil, badProof("PA-4.3-08", "proof has no htu")
	}
	if p.iat, ok = num(c, "iat"); !ok || math.IsNaN(p.iat) || math.IsInf(p.iat, 0) {
		return nil, badProof("PA-4.3-09", "proof has no numeric iat")
	}
	if v, present := c["ath"]; present {
		if p.ath, ok = v.(string); !ok {
			return nil, badProof("PA-4.3-10", "proof ath is not a string")
		}
		p.hasAth = true
	}
	if v, present := c["nonce"]; present {
		if p.nonce, ok = v.(string); !ok {
			return nil, badProof("", "proof nonce is not a string")
		}
		p.hasNon = true
	}
	return p, nil
}

func lookup(c keyCacher, raw string) (cachedKey, bool) {
	if c == nil {
		return cachedKey{}, false
	}
	return c.lookupKey(raw)
}

// verifySignature checks the proof's signature with the key in its header.
func (p *parsedProof) verifySignature() error {
	if _, err := jws.VerifyCompactFast(p.key, []byte(p.compact), jwa.ES256()); err != nil {
		return errors.New("proof signature does not verify with its header jwk")
	}
	return nil
}

func (s *Server) lookupKey(raw string) (cachedKey, bool) {
	s.keyCacheMu.Lock()
	defer s.keyCacheMu.Unlock()
	k, ok := s.keyCache[raw]
	return k, ok
}

func (s *Server) storeKey(raw string, k cachedKey) {
	s.keyCacheMu.Lock()
	defer s.keyCacheMu.Unlock()
	if len(s.keyCache) > 4096 {
		clear(s.keyCache)
	}
	s.keyCache[raw] = k
}

// decodeProofForLog decodes a DPoP header for the request log, whatever its
// validity.
func decodeProofForLog(h string) *JWT {
	j, err := splitJWS(h)
	if err != nil {
		return nil
	}
	p := &JWT{Compact: h, Header: j.header, Claims: j.claims, RawHeader: j.rawHeader, RawClaims: j.rawClaims}
	if m, ok := j.header["jwk"].(map[string]any); ok {
		if raw, err := json.Marshal(m); err == nil {
			if key, err := jwk.ParseKey(raw); err == nil {
				p.JKT, _ = thumbprint(key)
			}
		}
	}
	return p
}

// proofCheck says what a proof must match.
type proofCheck struct {
	htu           string // expected htu, normalised
	token         string // the access token sent with it; "" at the token endpoint
	tokenEndpoint bool
}

// checkProof verifies the DPoP header of r. It returns (nil, nil) when the
// request has no DPoP header and optional is true.
func (s *Server) checkProof(r *http.Request, pc proofCheck, optional bool) (*parsedProof, *protoError) {
	x := exchangeOf(r)
	hs := r.Header.Values("DPoP")
	if len(hs) == 0 {
		if optional {
			return nil, nil
		}
		return nil, s.dpopError(r, "invalid_dpop_proof", "the request has no DPoP proof")
	}
	if len(hs) > 1 {
		return nil, s.dpopError(r, "invalid_dpop_proof", "the request has more than one DPoP header")
	}
	p, perr := parseProof(hs[0], s)
	if perr != nil {
		if perr.rule != "" {
			s.violate(x.idx, perr.rule, "%s", perr.msg)
		}
		return nil, s.dpopError(r, "invalid_dpop_proof", perr.msg)
	}
	x.proof = &JWT{Compact: p.compact, Header: p.header, Claims: p.claims, RawHeader: p.rawHeader, RawClaims: p.rawClaims, JKT: p.jkt}
	// CO-4.3-02, CO-4.3-08: the signature verifies with the header key.
	if err := p.verifySignature(); err != nil {
		return nil, s.dpopError(r, "invalid_dpop_proof", err.Error())
	}
	// CO-4.3-05: iat within the window.
	now := s.clock.Now()
	iat := time.Unix(0, int64(p.iat*1e9))
	if p.iat < 0 || p.iat > 9e9 || iat.Before(now.Add(-proofWindow)) || iat.After(now.Add(proofWindow)) {
		return nil, s.dpopError(r, "invalid_dpop_proof", "proof iat is outside the 60 s acceptance window")
	}
	// CO-4.3-06: jti not accepted within the window.
	s.mu.Lock()
	replay := s.proofJTIs.seen(p.jti, now)
	if !replay {
		// A proof is accepted only while iat is within proofWindow of now,
		// so its jti can be replayed only until iat + proofWindow.
		s.proofJTIs.add(p.jti, iat.Add(proofWindow+time.Second), now)
	}
	s.mu.Unlock()
	if replay {
		s.violate(x.idx, "PA-4.3-05", "DPoP proof jti reused: a new proof is required for every request")
		return nil, s.dpopError(r, "invalid_dpop_proof", "proof jti was already used")
	}
	// CO-4.3-04: htm and htu. A proof for another method or URL breaks
	// PA-4.3-07 or PA-4.3-08 (MUSTs the fake sees broken).
	if p.htm != r.Method {
		s.violate(x.idx, "PA-4.3-07", "proof htm %q is not the request's method %s", p.htm, r.Method)
		return nil, s.dpopError(r, "invalid_dpop_proof", fmt.Sprintf("proof htm %q does not match the method %s", p.htm, r.Method))
	}
	hu, err := url.Parse(p.htu)
	if err != nil {
		return nil, s.dpopError(r, "invalid_dpop_proof", "proof htu is not a URL")
	}
	if hu.RawQuery != "" || hu.ForceQuery || hu.Fragment != "" || strings.ContainsAny(p.htu, "?#") {
		s.violate(x.idx, "PA-4.3-08", "proof htu carries a query or fragment")
		return nil, s.dpopError(r, "invalid_dpop_proof", "proof htu must not carry a query or fragment")
	}
	if normalizeHTU(hu) != pc.htu {
		// The answer compares the normalised URLs (CO-4.3-04); the
		// violation is recorded only when they differ after RFC 3986
		// syntax-based normalisation too (percent-encoding, dot
		// segments), which RFC 9449 section 4.3 allows a client: a false
		// violation is as wrong as a missed one.
		if looseHTU(normalizeHTU(hu)) != looseHTU(pc.htu) {
			s.violate(x.idx, "PA-4.3-08", "proof htu %s is not the request's URL %s", safeURL(normalizeHTU(hu)), safeURL(pc.htu))
		}
		return nil, s.dpopError(r, "invalid_dpop_proof", "proof htu does not match the request URL")
	}
	// CO-4.3-07, PA-4.3-11: ath.
	if pc.tokenEndpoint {
		if p.hasAth {
			s.violate(x.idx, "PA-4.3-11", "proof sent to the token endpoint has an ath claim")
			return nil, s.dpopError(r, "invalid_dpop_proof", "proofs sent to the token endpoint must not have ath")
		}
	} else {
		if !p.hasAth {
			s.violate(x.idx, "PA-4.3-10", "proof sent with a Session Token has no ath claim")
			return nil, s.dpopError(r, "invalid_dpop_proof", "proof has no ath")
		}
		if p.ath != tokenHash(pc.token) {
			s.violate(x.idx, "PA-4.3-10", "proof ath does not hash the token sent with it")
			return nil, s.dpopError(r, "invalid_dpop_proof", "proof ath does not match the access token")
		}
	}
	if !pc.tokenEndpoint {
		s.checkPublishedKey(x.idx, p.jkt)
	}
	// CO-4.3-10: nonce.
	if s.opts.Tokens.RequireNonce && (!p.hasNon || !s.nonceValid(x.host, p.nonce)) {
		msg := "a DPoP nonce is required"
		if p.hasNon {
			msg = "the DPoP nonce is stale or unknown"
		}
		return nil, s.dpopError(r, "use_dpop_nonce", msg)
	}
	return p, nil
}

// checkPublishedKey records PA-4.1-10 when a DPoP key is a key some client
// publishes in its JWKS. The token endpoint calls it after client
// authentication, when the client's keys are known.
func (s *Server) checkPublishedKey(idx int, jkt string) {
	s.clientMu.Lock()
	owner, published := s.published[jkt]
	s.clientMu.Unlock()
	if published {
		s.violate(idx, "PA-4.1-10", "DPoP proof key is a key published in the JWKS of %s", owner)
	}
}

// normalizeHTU normalises an http(s) URL for comparison: lower-case scheme
// and host, no default port, escaped path ("/" when empty), no query.
func normalizeHTU(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if p := u.Port(); p != "" && !(scheme == "https" && p == "443") && !(scheme == "http" && p == "80") {
		host += ":" + p
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path
}

// looseHTU is a normalised htu (normalizeHTU) after RFC 3986 section
// 6.2.2 syntax-based normalisation of its path as well: percent-encoded
// unreserved characters decoded, other escapes in upper case, dot
// segments removed. Two htu values equal under it name the same resource.
func looseHTU(htu string) string {
	u, err := url.Parse(htu)
	if err != nil {
		return htu
	}
	var b strings.Builder
	p := u.EscapedPath()
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			c := unhex(p[i+1])<<4 | unhex(p[i+2])
			if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0) {
				b.WriteByte(c)
			} else {
				b.WriteString(strings.ToUpper(p[i : i+3]))
			}
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	clean := path.Clean(b.String())
	if strings.HasSuffix(b.String(), "/") && clean != "/" {
		clean += "/"
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + clean
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// requestHTU is the normalised htu a proof for r must carry.
func requestHTU(r *http.Request) string {
	x := exchangeOf(r)
	u := &url.URL{Scheme: x.scheme, Host: x.host, Path: r.URL.Path, RawPath: r.URL.RawPath}
	return normalizeHTU(u)
}

// tokenHash is base64url(SHA-256(token)), the ath of a proof.
func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return b64.EncodeToString(sum[:])
}

// nonceState holds the nonces issued on one host, newest first.
type nonceState struct {
	issued []string
}

// currentNonce returns the host's newest nonce, creating one if needed.
func (s *Server) currentNonce(host string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nonces[host]
	if ns == nil {
		ns = &nonceState{issued: []string{newID("", 16)}}
		s.nonces[host] = ns
	}
	return ns.issued[0]
}

// rotateNonce issues a new nonce on host and returns it.
func (s *Server) rotateNonce(host string) string {
	n := newID("", 16)
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nonces[host]
	if ns == nil {
		ns = &nonceState{}
		s.nonces[host] = ns
	}
	ns.issued = append([]string{n}, ns.issued...)
	if len(ns.issued) > nonceHistory {
		ns.issued = ns.issued[:nonceHistory]
	}
	return n
}

func (s *Server) nonceValid(host, n string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nonces[host]
	if ns == nil || n == "" {
		return false
	}
	for _, v := range ns.issued {
		if v == n {
			return true
		}
	}
	return false
}

// newNonce issues a new DPoP nonce on the host of ep (EndpointToken and
// EndpointRevoke share the issuer host; EndpointAPI, EndpointConversation
// and EndpointOperations share the API host) and returns it. Older nonces
// stay acceptable until 4 newer ones exist; use it to test a stale nonce.
func (s *Server) newNonce(ep EndpointKind) string {
	host := s.authHost
	switch ep {
	case EndpointAPI, EndpointConversation, EndpointOperations:
		host = s.apiHost
	case EndpointMCP:
		host = s.mcpHost
	}
	return s.rotateNonce(host)
}
