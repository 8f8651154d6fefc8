package poppycheck

// Step 4: the APIs (spec 6) and the DPoP checks of a resource (spec 4.3).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/poppyproto/poppy/internal/jose"
)

// proofMod spoils a resource request's proof on purpose.
type proofMod int

const (
	proofOK        proofMod = iota
	proofStale              // iat ten minutes old
	proofOtherKey           // signed by a key the token isn't bound to
	proofBadSigned          // the signature doesn't verify
)

// resourceRequest sends a DPoP request with token (s.token when "") and a
// proof for it, retrying once on use_dpop_nonce (CO-4.3-10) and on a
// short 429 (CO-4.3-21).
func (p *prober) resourceRequest(ctx context.Context, s *session, method, rawURL string, body []byte, hdr http.Header, token string, mod proofMod) (*reply, error) {
	return p.resourceRequestRetry(ctx, 0, s, method, rawURL, body, hdr, token, mod, true)
}

// resourceRequestWithin is resourceRequest with a timeout of its own, d
// (a long poll's).
func (p *prober) resourceRequestWithin(ctx context.Context, d time.Duration, s *session, method, rawURL string, body []byte, hdr http.Header, token string, mod proofMod) (*reply, error) {
	return p.resourceRequestRetry(ctx, d, s, method, rawURL, body, hdr, token, mod, true)
}

// resourceRequestRetry is resourceRequest with a timeout d (0: the
// request timeout); without retry429 a 429 is returned as it is (the
// Mediated Sign-In rate limit probe counts its attempts and must not send
// another).
func (p *prober) resourceRequestRetry(ctx context.Context, d time.Duration, s *session, method, rawURL string, body []byte, hdr http.Header, token string, mod proofMod, retry429 bool) (*reply, error) {
	if token == "" {
		token = s.token
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		key := s.key
		target := htu(u)
		now := p.clock.Now()
		switch mod {
		case proofStale:
			now = now.Add(-10 * time.Minute)
		case proofOtherKey:
			if key, err = newDPoPKey(); err != nil {
				return nil, err
			}
		}
		proof, err := key.proof(method, target, token, s.nonce(u.Host), now)
		if err != nil {
			return nil, err
		}
		if mod == proofBadSigned {
			// Flip one bit of the signature's first byte.
			i := strings.LastIndexByte(proof, '.') + 1
			b := []byte(proof)
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			proof = string(b)
		}
		p.secret(proof, token)
		req, _ := http.NewRequest(method, rawURL, nil)
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("Authorization", "DPoP "+token)
		req.Header.Set("DPoP", proof)
		r, err := p.sendWithin(ctx, req, body, d)
		if err != nil {
			return r, err
		}
		s.setNonce(u.Host, r.get("DPoP-Nonce"))
		if code, _, _ := challenge(r.header, "DPoP"); code == "use_dpop_nonce" && r.status == http.StatusUnauthorized && attempt == 0 {
			n := r.get("DPoP-Nonce")
			if p.check("CO-4.3-10", n != "", r.ex, "use_dpop_nonce at %s with DPoP-Nonce %s", u.Host, present(n != "")) {
				continue
			}
		}
		if retry429 && r.status == http.StatusTooManyRequests && attempt < 2 && p.waitRetryAfter(ctx, r) {
			continue
		}
		return r, nil
	}
	return nil, errBudget
}

// openAPI checks every OpenAPI entry: its description parses (CO-6-02)
// and the API takes the DPoP Session Token (CO-6-03), answers a spoiled
// proof and an unknown token with the challenges of spec 4.3 and 6, and a
// request that needs sign-in with sign_in_required (CO-6-10).
func (p *prober) openAPI(ctx context.Context, s *session, api map[string]any) {
	p.step = "openapi"
	// The rules seen by calling the API, which need its description.
	calls := []string{"CO-6-03", "CO-6-09", "CO-6-10", "CO-4.3-01", "CO-4.3-02", "CO-4.3-03", "CO-4.3-05", "CO-4.3-09", "CO-4.3-19", "CO-4.4-02"}
	raw, _ := api["url"].(string)
	if ok, why := p.okURL(raw); !ok {
		p.fail("CO-6-02", nil, "openapi url %q: %s", raw, why)
		p.notObserved("the OpenAPI description couldn't be read (CO-6-02): the check knows no call to make", calls...)
		return
	}
	req, _ := http.NewRequest(http.MethodGet, raw, nil)
	req.Header.Set("Accept", "application/json, application/yaml")
	r, err := p.send(ctx, req, nil)
	if err == nil && r.status == http.StatusTooManyRequests {
		d, ok := parseRetryAfter(r.get("Retry-After"), p.clock.Now())
		if !ok {
			d = time.Second
		}
		if d <= 10*time.Second {
			t := time.NewTimer(d)
			select {
			case <-t.C:
				r, err = p.send(ctx, req, nil)
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
	if err != nil {
		if p.stop == nil && ctx.Err() == nil && !errors.Is(err, errStepStopped) {
			p.fail("CO-6-02", r.ex, "GET %s got no answer", raw)
		}
		p.notObserved("the OpenAPI description couldn't be read (CO-6-02): the check knows no call to make", calls...)
		return
	}
	if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
		// The description itself may need a token.
		if r2, err := p.resourceRequest(ctx, s, http.MethodGet, raw, nil, http.Header{"Accept": {"application/json, application/yaml"}}, "", proofOK); err == nil {
			r = r2
		}
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(r.body)
	ver := ""
	if doc != nil {
		ver = doc.OpenAPI
	}
	okVer := strings.HasPrefix(ver, "3.0.") || strings.HasPrefix(ver, "3.1.") || ver == "3.0" || ver == "3.1"
	if err == nil && doc != nil {
		if verr := doc.Validate(loader.Context); verr != nil && !strings.HasPrefix(ver, "3.1") {
			err = verr
		}
	}
	if !p.check("CO-6-02", r.status == http.StatusOK && err == nil && okVer, r.ex, "the OpenAPI description at %s: status %d, openapi %q, parse error %v", raw, r.status, ver, errText(err)) {
		p.notObserved("the OpenAPI description couldn't be read (CO-6-02): the check knows no call to make", calls...)
		return
	}
	base := raw
	if len(doc.Servers) > 0 && doc.Servers[0].URL != "" {
		if bu, err := url.Parse(raw); err == nil {
			if su, err := bu.Parse(doc.Servers[0].URL); err == nil {
				base = strings.TrimSuffix(su.String(), "/")
			}
		}
	} else if bu, err := url.Parse(raw); err == nil {
		base = bu.Scheme + "://" + bu.Host
	}
	if ok, why := p.okURL(base + "/"); !ok {
		// No rule names the description's servers: an agent can't call
		// this API, and the check says so rather than judge it.
		p.note("the OpenAPI description at %s names the server %s, %s", raw, base, why)
		p.notObserved("the OpenAPI description's server is not a URL an agent can call", calls...)
		return
	}
	open, closed := safeGets(doc)
	if len(open) == 0 {
		p.notObserved("the OpenAPI description has no GET without parameters that a signed-out Session may call", "CO-6-03", "CO-6-09", "CO-4.3-01", "CO-4.3-02", "CO-4.3-03", "CO-4.3-05", "CO-4.3-09", "CO-4.3-19")
	} else {
		p.callOpen(ctx, s, base, open)
	}
	if closed != "" {
		p.step = "openapi sign-in required"
		p.openClosed = base + closed
		r, err := p.resourceRequest(ctx, s, http.MethodGet, base+closed, nil, http.Header{"Accept": {"application/json"}}, "", proofOK)
		if err == nil {
			code, _, _ := challenge(r.header, "DPoP")
			p.check("CO-6-10", r.status == http.StatusForbidden && code == "sign_in_required", r.ex,
				"GET %s, which needs scopes, with a signed-out token answered %d, WWW-Authenticate %q", closed, r.status, r.get("WWW-Authenticate"))
			p.check("CO-4.4-02", r.status == http.StatusForbidden || r.status == http.StatusUnauthorized, r.ex,
				"GET %s, which the description says needs scopes, refused a signed-out token: %d", closed, r.status)
		}
	} else if p.openClosed == "" {
		p.notObserved("the OpenAPI description has no GET without parameters that needs scopes", "CO-6-10")
	}
}

// needsSignIn reports an answer that says the request needs a signed-in
// Session or more scopes (spec 6: 403 sign_in_required or
// insufficient_scope): the token was taken, the request wasn't allowed.
func needsSignIn(r *reply) bool {
	code, _, _ := challenge(r.header, "DPoP")
	if code == "" {
		code, _, _ = challenge(r.header, "Bearer")
	}
	return r.status == http.StatusForbidden && (code == "sign_in_required" || code == "insufficient_scope")
}

// callOpen calls the GETs the description lets a signed-out Session make,
// in turn, until one takes the token; a GET that answers it needs a sign-in
// after all (a description can't put scopes on every scheme) is the one
// that needs a sign-in, not a failure. It then spoils the request that
// worked in each way a Company must refuse.
func (p *prober) callOpen(ctx context.Context, s *session, base string, candidates []string) {
	p.step = "openapi call"
	accept := http.Header{"Accept": {"application/json"}}
	var r *reply
	target := ""
	for _, path := range candidates {
		t := base + path
		got, err := p.resourceRequest(ctx, s, http.MethodGet, t, nil, accept, "", proofOK)
		if err != nil {
			return
		}
		if needsSignIn(got) {
			if code, _, _ := challenge(got.header, "DPoP"); p.openClosed == "" && code == "sign_in_required" {
				p.openClosed = t
				p.pass("CO-6-10", got.ex, "GET %s with a signed-out token answered %d, WWW-Authenticate %q", path, got.status, got.get("WWW-Authenticate"))
			}
			continue
		}
		if got.status >= 500 {
			p.note("GET %s answered %d", t, got.status)
			continue
		}
		r, target = got, t
		break
	}
	if r == nil {
		p.notObserved("every GET the description lets a signed-out Session make answered that it needs a sign-in, or a server error",
			"CO-6-03", "CO-6-09", "CO-4.3-01", "CO-4.3-02", "CO-4.3-03", "CO-4.3-05", "CO-4.3-09", "CO-4.3-19")
		return
	}
	// The token was taken unless the answer is an authentication error:
	// what else a GET answers (a 404 of an empty list) is the API's.
	ok := r.status != http.StatusUnauthorized && r.status != http.StatusForbidden
	p.check("CO-6-03", ok, r.ex, "GET %s with the DPoP Session Token answered %d", target, r.status)
	if ok {
		p.openURL = target
	}
	p.check("CO-4.3-19", ok, r.ex, "the token in the Authorization header was enough, with no cookie: %d", r.status)
	p.check("CO-4.3-01", ok, r.ex, "the token works with proofs by the key of the proof it was issued with: %d", r.status)
	if !ok {
		return
	}
	p.step = "openapi challenges"
	bad := "pct_" + jose.RandomID(24)
	if r, err := p.resourceRequest(ctx, s, http.MethodGet, target, nil, accept, bad, proofOK); err == nil {
		code, _, _ := challenge(r.header, "DPoP")
		p.check("CO-6-09", r.status == http.StatusUnauthorized && code == "invalid_token", r.ex,
			"a token the Company never issued answered %d, WWW-Authenticate %q", r.status, r.get("WWW-Authenticate"))
	}
	for _, c := range []struct {
		mod  proofMod
		rule string
		what string
	}{
		{proofStale, "CO-4.3-05", "a proof whose iat is ten minutes old"},
		{proofOtherKey, "CO-4.3-03", "a proof by a key the token isn't bound to"},
		{proofOtherKey, "CO-4.3-01", "a proof by another key than the one the token was issued with"},
		{proofBadSigned, "CO-4.3-02", "a proof whose signature doesn't verify"},
	} {
		r, err := p.resourceRequest(ctx, s, http.MethodGet, target, nil, accept, "", c.mod)
		if err != nil {
			return
		}
		if c.mod == proofStale && r.status < 300 && s.nonce(u(target).Host) != "" {
			p.notObserved(nonceFreshness, c.rule)
			continue
		}
		code, _, has := challenge(r.header, "DPoP")
		if !has {
			code, _, _ = challenge(r.header, "Bearer")
		}
		// a failed proof check answers 400 or 401 (the spec gives
		// no status at resources; the SDK takes either), with
		// invalid_dpop_proof or use_dpop_nonce (spec 4.3); a proof by
		// another key than the token's may also be invalid_token.
		refused := code == "invalid_dpop_proof" || code == "use_dpop_nonce" || c.mod == proofOtherKey && code == "invalid_token"
		p.check(c.rule, (r.status == http.StatusUnauthorized || r.status == http.StatusBadRequest) && refused, r.ex, "%s answered %d, WWW-Authenticate %q", c.what, r.status, r.get("WWW-Authenticate"))
		if r.status >= 400 {
			p.check("CO-4.3-09", has && refused, r.ex,
				"%s: WWW-Authenticate %q (a DPoP challenge with invalid_dpop_proof or use_dpop_nonce)", c.what, r.get("WWW-Authenticate"))
		}
	}
}

// maxOpenCandidates bounds the GETs callOpen tries.
const maxOpenCandidates = 4

// safeGets finds in the description the GETs without required parameters
// that a signed-out Session may call (a security requirement with no
// scopes, or none), at most maxOpenCandidates of them, and one that needs
// scopes.
func safeGets(doc *openapi3.T) (open []string, closed string) {
	if doc.Paths == nil {
		return nil, ""
	}
	paths := doc.Paths.InMatchingOrder()
	slices.Sort(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		op := item.Get
		if op == nil || strings.Contains(path, "{") {
			continue
		}
		required := false
		for _, prm := range append(item.Parameters, op.Parameters...) {
			if prm.Value != nil && prm.Value.Required {
				required = true
			}
		}
		if required {
			continue
		}
		sec := doc.Security
		if op.Security != nil {
			sec = *op.Security
		}
		needs := len(sec) > 0
		for _, req := range sec {
			n := 0
			for _, scopes := range req {
				n += len(scopes)
			}
			if n == 0 {
				needs = false
			}
		}
		if needs && closed == "" {
			closed = path
		}
		if !needs && len(open) < maxOpenCandidates {
			open = append(open, path)
		}
	}
	return open, closed
}

func errText(err error) string {
	if err == nil {
		return "none"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// jsonBody encodes v.
func jsonBody(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSpace(b.Bytes())
}

// u parses a URL the check built itself.
func u(raw string) *url.URL {
	v, _ := url.Parse(raw)
	if v == nil {
		return &url.URL{}
	}
	return v
}
