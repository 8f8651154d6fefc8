package poppy_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

// Issue 21 item 6, PA-6-04: ResponseError reads every challenge and takes
// the one of the scheme the request's token used: Bearer for an MCP
// request, even when a DPoP challenge with an error comes first.
func TestPA_6_04_ResponseErrorChoosesByScheme(t *testing.T) {
	const header = `DPoP error="invalid_dpop_proof", algs="ES256", Bearer error="insufficient_scope", scope="poppy:write"`
	for _, c := range []struct{ authz, code, scope string }{
		{"Bearer tok", "insufficient_scope", "poppy:write"},
		{"DPoP tok", "invalid_dpop_proof", ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, "https://mcp.example.test/mcp", nil)
		req.Header.Set("Authorization", c.authz)
		resp := &http.Response{StatusCode: 403, Header: http.Header{"Www-Authenticate": {header}}, Request: req, Body: http.NoBody}
		var pe *poppy.Error
		if !errors.As(poppy.ResponseError(resp), &pe) || pe.Code != c.code || strings.Join(pe.Scope, " ") != c.scope {
			t.Errorf("%s: %+v", c.authz, pe)
		}
	}
}

// Issue 21 item 6, PA-6-04: a DPoP challenge whose algs excludes ES256 (the
// SDK's one algorithm, A-46) gives a typed error, at a resource and at the
// token endpoint, naming what the Company accepts.
func TestPA_6_04_AlgsWithoutES256(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/orders", nil)
	req.Header.Set("Authorization", "DPoP tok")
	resp := &http.Response{StatusCode: 401, Request: req, Body: http.NoBody,
		Header: http.Header{"Www-Authenticate": {`DPoP error="invalid_dpop_proof", algs="RS256 PS256"`}}}
	err := poppy.ResponseError(resp)
	var pe *poppy.Error
	if !errors.Is(err, poppy.ErrUnsupportedDPoPAlgorithm) || !errors.As(err, &pe) || strings.Join(pe.Algs, " ") != "RS256 PS256" ||
		!strings.Contains(err.Error(), "RS256") {
		t.Fatalf("resource: %v (%+v)", err, pe)
	}
	resp.Header.Set("Www-Authenticate", `DPoP error="invalid_dpop_proof", algs="RS256 ES256"`)
	if err := poppy.ResponseError(resp); errors.Is(err, poppy.ErrUnsupportedDPoPAlgorithm) {
		t.Fatalf("algs with ES256: %v", err)
	}

	// At the token endpoint: the Session can't start, and says why.
	e, h := hostileEnv(t, nil, nil)
	h.On(tokenPath, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		hd := http.Header{"Www-Authenticate": {`DPoP error="invalid_dpop_proof", algs="EdDSA"`}, "Content-Type": {"application/json"}}
		return testenv.Answer(req, 400, hd, `{"error":"invalid_dpop_proof"}`), nil
	})
	_, err = e.company("example.test").Session(ctx, "alice", nil)
	if !errors.Is(err, poppy.ErrUnsupportedDPoPAlgorithm) || !errors.Is(err, poppy.ErrInvalidDPoPProof) {
		t.Fatalf("Session start: %v", err)
	}
}

// Issue 21 item 6, PA-6-04: a DPoP request answered with a Bearer
// challenge first and the DPoP one after is handled by the DPoP challenge
// (here sign_in_required, after a use_dpop_nonce retry on the first
// request), not by renewing the token the Bearer challenge calls invalid.
func TestPA_6_04_TransportTakesTheDPoPChallenge(t *testing.T) {
	e, h := hostileEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}}, nil)
	h.On("/orders", func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil {
			if v := resp.Header.Get("WWW-Authenticate"); v != "" {
				resp.Header.Set("WWW-Authenticate", `Bearer error="invalid_token", `+v)
			}
		}
		return resp, err
	})
	s := e.session("alice")
	before := len(sdkRequests(e.srv, poppytest.EndpointToken))
	if st, body := e.get(s, "/products"); st != 200 {
		t.Fatalf("GET /products: %d %s", st, body)
	}
	st, _ := e.get(s, "/orders") // sign_in_required, after the nonce retry
	if st != 403 {
		t.Fatalf("GET /orders: %d, want 403 sign_in_required", st)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)) - before; n != 0 {
		t.Fatalf("%d token requests: the Bearer challenge's invalid_token renewed the DPoP token", n)
	}
}
