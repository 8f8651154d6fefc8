package poppytest_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/poppyproto/poppy/poppytest"
)

var b64 = base64.RawURLEncoding

// rawAgent is a minimal Personal Agent for raw requests: an ES256 signing
// key published in a JWKS, a client metadata document, a separate DPoP key,
// and builders for assertions and proofs with knobs to break each check.
type rawAgent struct {
	t        testing.TB
	srv      *poppytest.Server
	host     string
	clientID string
	key      *ecdsa.PrivateKey // published in the JWKS
	kid      string
	dpop     *ecdsa.PrivateKey            // default DPoP key, never published
	userKeys map[string]*ecdsa.PrivateKey // DPoP key per User (spec 4.3)

	mu       sync.Mutex
	metaMods func(map[string]any)
	jwksRaw  []byte // replaces the JWKS when set
	status   int    // status of the metadata document when not 0
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newAgent serves a raw agent at https://{host}/agent.json.
func newAgent(t testing.TB, srv *poppytest.Server, host string) *rawAgent {
	t.Helper()
	a := &rawAgent{t: t, srv: srv, host: host, clientID: "https://" + host + "/agent.json",
		key: newKey(t), kid: "k1", dpop: newKey(t), userKeys: map[string]*ecdsa.PrivateKey{}}
	srv.HandleAgent(host, a)
	return a
}

func (a *rawAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch r.URL.Path {
	case "/agent.json":
		if a.status != 0 {
			w.WriteHeader(a.status)
			return
		}
		md := map[string]any{
			"client_id":                  a.clientID,
			"client_name":                "Raw Agent",
			"jwks_uri":                   "https://" + a.host + "/jwks.json",
			"redirect_uris":              []any{"https://" + a.host + "/oauth/callback"},
			"token_endpoint_auth_method": "private_key_jwt",
			"extensions":                 map[string]any{"agent.test/foo": map[string]any{"version": "1"}},
		}
		if a.metaMods != nil {
			a.metaMods(md)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(md)
	case "/jwks.json":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if a.jwksRaw != nil {
			w.Write(a.jwksRaw)
			return
		}
		w.Write(jwksOf(a.t, a.kid, &a.key.PublicKey))
	default:
		http.NotFound(w, r)
	}
}

// jwksOf builds a JWK Set with jwx.
func jwksOf(t testing.TB, kid string, pub *ecdsa.PublicKey) []byte {
	k, err := jwk.Import(pub)
	if err != nil {
		t.Fatal(err)
	}
	k.Set(jwk.KeyIDKey, kid)
	k.Set(jwk.AlgorithmKey, jwa.ES256())
	set := jwk.NewSet()
	set.AddKey(k)
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (a *rawAgent) setMeta(f func(map[string]any)) {
	a.mu.Lock()
	a.metaMods = f
	a.mu.Unlock()
}

// signJWT signs header and claims with ES256 (raw r||s signature).
func signJWT(t testing.TB, key *ecdsa.PrivateKey, header, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64.EncodeToString(sig)
}

func randID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return b64.EncodeToString(b)
}

type claimsMod func(h, c map[string]any)

// clientAssertion is a valid private_key_jwt client assertion unless mods
// break it.
func (a *rawAgent) clientAssertion(mods ...claimsMod) string {
	now := a.srv.Clock().Now().Unix()
	h := map[string]any{"alg": "ES256", "typ": "JWT", "kid": a.kid}
	c := map[string]any{"iss": a.clientID, "sub": a.clientID, "aud": a.srv.EndpointURL(poppytest.EndpointToken),
		"iat": now, "exp": now + 60, "jti": randID()}
	for _, m := range mods {
		m(h, c)
	}
	return signJWT(a.t, a.key, h, c)
}

// sessionAssertion is a valid Session assertion for user unless mods break it.
func (a *rawAgent) sessionAssertion(user string, mods ...claimsMod) string {
	now := a.srv.Clock().Now().Unix()
	h := map[string]any{"alg": "ES256", "typ": "JWT", "kid": a.kid}
	c := map[string]any{"iss": a.clientID, "sub": user, "aud": a.srv.EndpointURL(poppytest.EndpointToken),
		"iat": now, "exp": now + 60, "jti": randID()}
	for _, m := range mods {
		m(h, c)
	}
	return signJWT(a.t, a.key, h, c)
}

func set(k string, v any) claimsMod { return func(_, c map[string]any) { c[k] = v } }

// proofBuild is a DPoP proof under construction.
type proofBuild struct {
	key     *ecdsa.PrivateKey
	header  map[string]any
	claims  map[string]any
	flipSig bool
}

type pmod func(*proofBuild)

func withToken(tok string) pmod {
	return func(p *proofBuild) {
		sum := sha256.Sum256([]byte(tok))
		p.claims["ath"] = b64.EncodeToString(sum[:])
	}
}
func withNonce(n string) pmod { return func(p *proofBuild) { p.claims["nonce"] = n } }
func withKey(k *ecdsa.PrivateKey) pmod {
	return func(p *proofBuild) { p.key = k; p.header["jwk"] = publicJWK(k) }
}
func withClaim(k string, v any) pmod  { return func(p *proofBuild) { p.claims[k] = v } }
func withHeader(k string, v any) pmod { return func(p *proofBuild) { p.header[k] = v } }
func withoutClaim(k string) pmod      { return func(p *proofBuild) { delete(p.claims, k) } }
func flipSignature() pmod             { return func(p *proofBuild) { p.flipSig = true } }

func publicJWK(k *ecdsa.PrivateKey) map[string]any {
	return map[string]any{"kty": "EC", "crv": "P-256",
		"x": b64.EncodeToString(k.X.FillBytes(make([]byte, 32))),
		"y": b64.EncodeToString(k.Y.FillBytes(make([]byte, 32)))}
}

// proof is a valid DPoP proof for method and u unless mods break it.
func (a *rawAgent) proof(method, u string, mods ...pmod) string {
	p := &proofBuild{
		key:    a.dpop,
		header: map[string]any{"typ": "dpop+jwt", "alg": "ES256", "jwk": publicJWK(a.dpop)},
		claims: map[string]any{"jti": randID(), "htm": method, "htu": u, "iat": a.srv.Clock().Now().Unix()},
	}
	for _, m := range mods {
		m(p)
	}
	s := signJWT(a.t, p.key, p.header, p.claims)
	if p.flipSig {
		i := strings.LastIndexByte(s, '.') + 1
		sig, _ := b64.DecodeString(s[i:])
		sig[5] ^= 0x01
		s = s[:i] + b64.EncodeToString(sig)
	}
	return s
}

// response is a decoded HTTP response.
type response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

func (r *response) str(k string) string { s, _ := r.Body[k].(string); return s }

func do(t testing.TB, c *http.Client, req *http.Request) *response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := &response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	json.Unmarshal(raw, &out.Body)
	return out
}

func get(t testing.TB, srv *poppytest.Server, u string, hdr ...string) *response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, srv.Client(), req)
}

// startForm is the form of a Session start (spec 4.2).
func (a *rawAgent) startForm(user string) url.Values {
	return url.Values{
		"grant_type":            {"urn:ietf:params:oauth:grant-type:jwt-bearer"},
		"assertion":             {a.sessionAssertion(user)},
		"client_id":             {a.clientID},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {a.clientAssertion()},
	}
}

// renewForm is the form of a Session renewal.
func (a *rawAgent) renewForm(user, sessionID string) url.Values {
	f := a.startForm(user)
	f.Set("session_id", sessionID)
	return f
}

// postForm POSTs form to u with headers given as name, value pairs.
func postForm(t testing.TB, srv *poppytest.Server, u string, form url.Values, hdr ...string) *response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, srv.Client(), req)
}

// userKey returns the DPoP key of user: one key per User (spec 4.3).
func (a *rawAgent) userKey(user string) pmod {
	a.mu.Lock()
	defer a.mu.Unlock()
	if user == "" {
		return func(*proofBuild) {}
	}
	k := a.userKeys[user]
	if k == nil {
		k = newKey(a.t)
		a.userKeys[user] = k
	}
	return withKey(k)
}

// userOf returns the sub of a form's assertion.
func userOf(form url.Values) string {
	parts := strings.Split(form.Get("assertion"), ".")
	if len(parts) != 3 {
		return ""
	}
	p, _ := b64.DecodeString(parts[1])
	var c struct{ Sub string }
	json.Unmarshal(p, &c)
	return c.Sub
}

// token POSTs form to the token endpoint with a fresh valid proof signed by
// the DPoP key of the assertion's User.
func (a *rawAgent) token(form url.Values, mods ...pmod) *response {
	a.t.Helper()
	mods = append([]pmod{a.userKey(userOf(form))}, mods...)
	return postForm(a.t, a.srv, a.srv.EndpointURL(poppytest.EndpointToken), form, "DPoP", a.proof("POST", a.srv.EndpointURL(poppytest.EndpointToken), mods...))
}

// start starts a Session for user and fails the test unless it works.
func (a *rawAgent) start(user string) *response {
	a.t.Helper()
	r := a.token(a.startForm(user))
	if r.Status != http.StatusOK {
		a.t.Fatalf("session start: %d %s", r.Status, r.Raw)
	}
	return r
}

// call sends an API request with tok and a valid proof unless mods break it.
func (a *rawAgent) call(method, path, tok string, body string, mods ...pmod) *response {
	a.t.Helper()
	u := a.srv.EndpointURL(poppytest.EndpointAPI) + path
	htu, _, _ := strings.Cut(u, "?")
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, u, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "DPoP "+tok)
	info, _ := a.srv.Tokens().Get(tok)
	req.Header.Set("DPoP", a.proof(method, htu, append([]pmod{a.userKey(info.UserID), withToken(tok)}, mods...)...))
	return do(a.t, a.srv.Client(), req)
}

// wwwAuth returns the WWW-Authenticate header.
func (r *response) wwwAuth() string { return r.Header.Get("WWW-Authenticate") }

// takeRules takes the server's violations and returns their rule IDs.
func takeRules(srv *poppytest.Server) map[string]int {
	out := map[string]int{}
	for _, v := range srv.TakeViolations() {
		out[v.Rule]++
	}
	return out
}

// wantRules fails unless exactly the given rules were violated.
func wantRules(t testing.TB, srv *poppytest.Server, rules ...string) {
	t.Helper()
	got := takeRules(srv)
	want := map[string]int{}
	for _, r := range rules {
		want[r]++
	}
	if !maps.Equal(got, want) {
		t.Errorf("violations = %v, want %v", got, want)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records and stops the
// goroutine, to observe NewServer configuration errors.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()        {}
func (f *fatalRecorder) Cleanup(func()) {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalRecorder) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }

// configError runs NewServer with opts and returns its fatal message, or
// "" if it started (the server is then closed).
func configError(t *testing.T, opts *poppytest.Options) string {
	t.Helper()
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s := poppytest.NewServer(f, opts); s != nil {
			s.Close()
		}
	}()
	<-done
	return f.msg
}

// within reports whether |a-b| <= d.
func within(a, b time.Time, d time.Duration) bool {
	diff := a.Sub(b)
	return diff <= d && diff >= -d
}

// pa names a PA rule a client broke, as Violation.Rule has it. The tests of
// this package show that the fake detects such violations; they don't show
// that any Personal Agent complies, so they don't spell PA IDs out.
func pa(id string) string { return "PA" + "-" + id }

// mcp2URL is the url of the second MCP server
// (MCPServingOptions.SecondServer).
func mcp2URL(srv *poppytest.Server) string {
	return strings.Replace(srv.EndpointURL(poppytest.EndpointMCP), "https://mcp.", "https://mcp2.", 1)
}

// mcpMetadataURL is where the MCP server's RFC 9728 protected resource
// metadata is served: the well-known segment inserted before the path.
func mcpMetadataURL(srv *poppytest.Server) string {
	return strings.TrimSuffix(srv.EndpointURL(poppytest.EndpointMCP), "/mcp") + "/.well-known/oauth-protected-resource/mcp"
}
