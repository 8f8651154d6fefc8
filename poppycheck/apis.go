package poppycheck

// Step 4: the APIs (spec 6) and the DPoP checks of a resource (spec 4.3).

import (
	"bytes"
	"context"
	"encoding/json"
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
	proofOtherURL           // htu of another path
	proofOtherKey           // signed by a key the token isn't bound to
	proofBadSigned          // the signature doesn't verify
)

// resourceRequest sends a DPoP request with token (s.token when "") and a
// proof for it, retrying once on use_dpop_nonce (CO-4.3-10) and on a
// short 429 (CO-4.3-21).
func (p *prober) resourceRequest(ctx context.Context, s *session, method, rawURL string, body []byte, hdr http.Header, token string, mod proofMod) (*reply, error) {
	return p.resourceRequestRetry(ctx, s, method, rawURL, body, hdr, token, mod, true)
}

// resourceRequestRetry is resourceRequest; without retry429 a 429 is
// returned as it is (the Mediated Sign-In rate limit probe counts its
// attempts and must not send another).
func (p *prober) resourceRequestRetry(ctx context.Context, s *session, method, rawURL string, body []byte, hdr http.Header, token string, mod proofMod, retry429 bool) (*reply, error) {
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
		case proofOtherURL:
			c := *u
			c.Path = strings.TrimSuffix(c.Path, "/") + "/poppy-check-other"
			target = htu(&c)
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
		r, err := p.send(ctx, req, body)
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
	raw, _ := api["url"].(string)
	if !isHTTPS(raw) {
		p.fail("CO-6-02", nil, "openapi url %q is not an https URL", raw)
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
		p.fail("CO-6-02", r.ex, "GET %s got no answer", raw)
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
	open, closed := safeGets(doc)
	if open == "" {
		p.notObserved("the OpenAPI description has no GET without parameters that a signed-out Session may call", "CO-6-03", "CO-6-09", "CO-4.3-02", "CO-4.3-03", "CO-4.3-05", "CO-4.3-09", "CO-4.3-19")
	} else {
		p.callOpen(ctx, s, base+open)
	}
	if closed == "" {
		p.notObserved("the OpenAPI description has no GET without parameters that needs scopes", "CO-6-10")
	} else {
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
	}
}

// callOpen calls a GET a signed-out Session may make, then spoils it.
func (p *prober) callOpen(ctx context.Context, s *session, target string) {
	p.step = "openapi call"
	accept := http.Header{"Accept": {"application/json"}}
	r, err := p.resourceRequest(ctx, s, http.MethodGet, target, nil, accept, "", proofOK)
	if err != nil {
		return
	}
	ok := r.status >= 200 && r.status < 300
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
		code, _, has := challenge(r.header, "DPoP")
		p.check(c.rule, r.status == http.StatusUnauthorized && code == "invalid_dpop_proof", r.ex, "%s answered %d, WWW-Authenticate %q", c.what, r.status, r.get("WWW-Authenticate"))
		if r.status >= 400 {
			p.check("CO-4.3-09", has && (code == "invalid_dpop_proof" || code == "use_dpop_nonce"), r.ex,
				"%s: WWW-Authenticate %q (a DPoP challenge with invalid_dpop_proof or use_dpop_nonce)", c.what, r.get("WWW-Authenticate"))
		}
	}
}

// safeGets finds in the description a GET without required parameters
// that a signed-out Session may call (a security requirement with no
// scopes, or none) and one that needs scopes.
func safeGets(doc *openapi3.T) (open, closed string) {
	if doc.Paths == nil {
		return "", ""
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
		if !needs && open == "" {
			open = path
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
