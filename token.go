package poppy

// Token requests (spec 4.2, 4.3, 4.8).
//
// Every request to the token endpoint carries a fresh client assertion
// (PA-4.1-07) and, unless it asks for a Bearer token, a fresh DPoP proof
// without ath (PA-4.3-05, PA-4.3-11). The request is built anew for each
// attempt, so a retry never reuses an assertion or proof jti. Only rejected
// requests are retried: use_dpop_nonce once with the nonce the Company sent
// (PA-4.3-12), and 429 after at least Retry-After (PA-4.2-19). Any other
// error is returned at once, typed, without a loop (PA-4.2-17).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/retry"
	"github.com/poppyproto/poppy/internal/wire"
)

const (
	grantJWTBearer    = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	grantRefreshToken = "refresh_token"
	assertionType     = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
)

// tokenResponse is a token endpoint's success response (spec 4.2, 4.4).
type tokenResponse struct {
	AccessToken           string          `json:"access_token"`
	TokenType             string          `json:"token_type"`
	ExpiresIn             json.RawMessage `json:"expires_in"`
	Scope                 *string         `json:"scope"`
	SessionID             string          `json:"session_id"`
	SignedIn              bool            `json:"signed_in"`
	RefreshToken          string          `json:"refresh_token,omitempty"`
	RefreshTokenExpiresIn accountSeconds  `json:"refresh_token_expires_in,omitempty"`

	expiresIn time.Duration
	issued    time.Time // when it was received; zero means now
	adopted   bool      // taken from another replica's refresh, not requested
}

// accountSeconds is refresh_token_expires_in (PA-4.4-12): whole seconds,
// clamped by companySeconds to rangeAccountLifetime, so that multiplying it
// by time.Second can't overflow; 0 when the Company gave no usable
// positive number.
type accountSeconds int64

// UnmarshalJSON reads any JSON value; a non-number or non-positive number
// is 0 (no expiry), a huge one the range's maximum.
func (s *accountSeconds) UnmarshalJSON(b []byte) error {
	*s = 0
	if d, positive, ok := companySeconds(string(b), rangeAccountLifetime); ok && positive {
		*s = accountSeconds(d / time.Second)
	}
	return nil
}

// oauthError is the OAuth error body.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
	Extension   string `json:"extension"`
}

// postForm sends a form POST to endpoint with a fresh client assertion and,
// when key is non-nil, a fresh DPoP proof, retrying only what was rejected
// unprocessed (use_dpop_nonce once, 429 within limits). build returns the
// grant's own parameters and is called for every attempt. On success it
// returns the status and the body, capped.
func (a *Agent) postForm(ctx context.Context, c *Company, endpoint string, key *dpopKey, build func() (url.Values, error)) ([]byte, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	u, err := a.ParseURL(endpoint)
	if err != nil {
		return nil, err
	}
	htu := htuOf(u)
	nonceRetried, connRetried := false, false
	for attempt := 0; ; attempt++ {
		form, err := build()
		if err != nil {
			return nil, err
		}
		replaySafe := replaySafeGrant(form.Get("grant_type"))
		now := a.clock.Now()
		ca, err := a.id.clientAssertion(c.meta.TokenEndpoint, now)
		if err != nil {
			return nil, fmt.Errorf("poppy: signing client assertion: %w", err)
		}
		form.Set("client_id", a.id.clientID)
		form.Set("client_assertion_type", assertionType)
		form.Set("client_assertion", ca)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
		if err != nil {
			return nil, fmt.Errorf("poppy: %w", err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		if key != nil {
			p, err := key.proof(http.MethodPost, htu, "", a.nonces.get(originOf(u)), now)
			if err != nil {
				return nil, fmt.Errorf("poppy: signing DPoP proof: %w", err)
			}
			req.Header.Set("DPoP", p)
		}
		var tr connTrace
		req = req.WithContext(httptrace.WithClientTrace(ctx, tr.trace()))
		resp, err := a.direct.Do(req) // never redirected: the body holds credentials
		if err != nil {
			// A pooled connection the server closed as the request went out
			// (its keep-alive timeout): sent again once, on a new
			// connection, with a fresh assertion and proof, when a replay
			// is harmless. net/http itself resends any request it provably
			// did not write, which covers a rotating refresh.
			if replaySafe && !connRetried && tr.reusedNoAnswer() && ctx.Err() == nil {
				connRetried = true
				a.log.DebugContext(ctx, "poppy: token endpoint connection closed before any answer; retrying once", "url", endpointOf(u), "error", err)
				continue
			}
			return nil, fmt.Errorf("poppy: POST %s: %w", endpointOf(u), unwrapURLError(err))
		}
		_, learned := a.nonces.learn(u, resp.Header)
		body, rerr := bounded.ReadAll(resp.Body, a.opts.MaxResponseBytes)
		resp.Body.Close()
		a.log.DebugContext(ctx, "poppy: "+c.endpointName(endpoint), "url", endpointOf(u),
			slog.String("grant_type", form.Get("grant_type")), "status", resp.StatusCode, "attempt", attempt+1)
		if rerr != nil {
			if !errors.Is(rerr, ErrResponseTooLarge) {
				rerr = fmt.Errorf("reading the response: %w", rerr)
			}
			return nil, fmt.Errorf("poppy: POST %s: %w", endpointOf(u), rerr)
		}
		if resp.StatusCode == http.StatusOK {
			return body, nil
		}
		perr := a.responseError(u, resp, body)
		switch {
		// PA-4.3-12, PA-4.3-15: one retry with the nonce the Company sent.
		case perr.Code == "use_dpop_nonce" && key != nil && learned && !nonceRetried:
			nonceRetried = true
			continue
		// PA-4.2-19, PA-4.3-27..29
		case resp.StatusCode == http.StatusTooManyRequests:
			if werr := a.waitRateLimit(ctx, perr, attempt); werr != nil {
				return nil, werr
			}
			continue
		}
		return nil, perr
	}
}

// replaySafeGrant reports whether a token endpoint request may be sent again
// when it is unknown whether the Company received it (spec 4.2, 4.6): a
// jwt-bearer grant (a replay starts or renews a Session again), a
// device_code poll (a replay is one more poll), and the requests without a
// grant_type (revocation, device authorization). A rotating refresh_token
// or an authorization code is used up by its first use, so a replay could
// lose the Account Token or trip code-replay detection.
func replaySafeGrant(grantType string) bool {
	switch grantType {
	case grantJWTBearer, grantDeviceCode, "":
		return true
	}
	return false
}

const grantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"

// connTrace records whether a request went out on a reused connection and
// whether any byte of an answer came back.
type connTrace struct {
	mu            sync.Mutex
	reused, heard bool
}

func (c *connTrace) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			c.mu.Lock()
			c.reused = i.Reused
			c.mu.Unlock()
		},
		GotFirstResponseByte: func() {
			c.mu.Lock()
			c.heard = true
			c.mu.Unlock()
		},
	}
}

// reusedNoAnswer reports a failure on a pooled connection before any byte
// of an answer: the signature of a server closing an idle connection.
func (c *connTrace) reusedNoAnswer() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reused && !c.heard
}

// waitRateLimit sleeps before retrying a 429 (spec 4.3): at least
// Retry-After, or 1 s, 2 s, 4 s without it. It returns the 429 as an
// error when retries are used up, the wait is longer than MaxRetryWait, or
// ctx ends first.
func (a *Agent) waitRateLimit(ctx context.Context, perr *Error, attempt int) error {
	if perr.Code == "" {
		perr.Code = "rate_limited"
	}
	wait, ok := a.RetryWait(perr.RetryAfter, attempt)
	if !ok {
		return perr
	}
	a.log.DebugContext(ctx, "poppy: rate limited, waiting", "endpoint", perr.Endpoint, "wait", wait)
	if err := a.clock.Sleep(ctx, wait); err != nil {
		return fmt.Errorf("%w (while waiting to retry): %w", perr, err)
	}
	return nil
}

// responseError builds an *Error from an error response: the OAuth JSON
// body if there is one, the WWW-Authenticate challenge, Retry-After.
func (a *Agent) responseError(u *url.URL, resp *http.Response, body []byte) *Error {
	e := &Error{Endpoint: endpointOf(u), Status: resp.StatusCode}
	cs := parseChallenges(resp.Header)
	if c, ok := pick(cs, "DPoP"); ok { // PA-6-04: the token endpoint takes DPoP proofs
		e.Code, e.Scope = c.code, c.scope
	}
	e.Algs = dpopAlgs(cs)
	var oe oauthError
	if len(body) > 0 && json.Unmarshal(body, &oe) == nil {
		if oe.Error != "" {
			e.Code = oe.Error
		}
		e.Description = cleanText(oe.Description)
		e.Extension = cleanText(oe.Extension)
	}
	e.Code = cleanText(e.Code)
	if resp.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = retryAfter(resp.Header, a.clock.Now())
		if e.Code == "" {
			e.Code = "rate_limited"
		}
	}
	return e
}

// retryAfter reads a response's Retry-After (PA-4.3-28) by the SDK's one
// rule (internal/retry.After).
func retryAfter(h http.Header, now time.Time) time.Duration {
	return retry.After(h.Get("Retry-After"), now)
}

// parseTokenResponse decodes and checks a token response (PA-4.2-11..13):
// an access token, a positive integer expires_in, and the token_type that
// matches how it was asked for.
func parseTokenResponse(body []byte, bearer bool) (*tokenResponse, error) {
	var tr tokenResponse
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalidTokenResponse)
	}
	if tr.AccessToken == "" {
		return nil, fmt.Errorf("%w: no access_token", ErrInvalidTokenResponse)
	}
	want := "DPoP"
	if bearer {
		want = "Bearer"
	}
	if !strings.EqualFold(tr.TokenType, want) {
		return nil, fmt.Errorf("%w: got %q, want %q", ErrUnexpectedTokenType, cleanText(tr.TokenType), want)
	}
	// PA-4.2-13: required and positive; clamped so that no value overflows
	// into an expiry in the past.
	d, positive, ok := companySeconds(string(tr.ExpiresIn), rangeTokenLifetime)
	if !ok || !positive {
		return nil, fmt.Errorf("%w: expires_in must be a positive number of seconds", ErrInvalidTokenResponse)
	}
	tr.expiresIn = d
	if tr.SessionID == "" {
		return nil, fmt.Errorf("%w: no session_id", ErrInvalidTokenResponse)
	}
	return &tr, nil
}

// drain discards a little of a response body so the connection can be
// reused, then closes it (internal/wire).
func drain(resp *http.Response) { wire.Drain(resp) }

// isContextErr reports whether err is ctx's own cancellation.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// A credential exchange is a request whose answer carries a credential the
// SDK must keep (a rotated Account Token, a sign-in's Account Token, a
// Session's new token), together with the keystore lock it waits for and
// the write that keeps the answer. Once its request may have reached the
// Company, the Company may have consumed what it sent (a rotating Account
// Token, an authorization or device code: RFC 6749 sections 4.1.2 and 6,
// spec 4.8 PA-4.8-04), so an answer abandoned half read, or
// read and not written, signs the User out. A caller that gives up (an
// HTTP handler whose client went away, a deadline over a slow connection)
// is the everyday case, far more frequent than a crash.
//
// The rule, in this one place: every credential exchange runs through
// settle (or, for the token cache's renewal that several callers share,
// begin and wait), on a context that keeps the caller's values but not its
// cancellation or deadline, bounded by exchangeTimeout instead; the caller
// returns on its own ctx.Done(), and the exchange finishes, and keeps its
// answer, without it. Its callers: Session.token (every renewal of a
// Session Token, by API calls, Token and Company.Session alike),
// completeSignIn (ExchangeCode and PollDevice), useAccountToken, and
// Mediated Sign-In's two steps.

// exchangeTimeout bounds a credential exchange once begun, whatever its
// caller does: its keystore lock waits, its token requests (each bounded
// by requestTimeout, nonce and 429 retries included) and its writes.
const exchangeTimeout = 2 * time.Minute

// exchange is a credential exchange under way (begin).
type exchange[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// begin starts the credential exchange f on a context that keeps ctx's
// values but not its cancellation or deadline, bounded by exchangeTimeout,
// and returns at once; wait gets its result. The caller must have checked
// that ctx was not already done: an exchange nobody waits for from the
// start is not begun.
func begin[T any](ctx context.Context, f func(context.Context) (T, error)) *exchange[T] {
	x := &exchange[T]{done: make(chan struct{})}
	xctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exchangeTimeout)
	go func() {
		defer close(x.done)
		defer cancel()
		x.v, x.err = f(xctx)
	}()
	return x
}

// wait returns the exchange's result, or ctx's error if ctx ends first
// (the exchange goes on without the caller).
func (x *exchange[T]) wait(ctx context.Context) (T, error) {
	select {
	case <-x.done:
		return x.v, x.err
	case <-ctx.Done():
		select {
		case <-x.done: // both: the result, which is kept anyway
			return x.v, x.err
		default:
		}
		var zero T
		return zero, ctx.Err()
	}
}

// settle runs the credential exchange f to its end on its own bounded time
// (begin) and returns its result, or ctx's error as soon as ctx ends. A
// ctx already done sends nothing.
func settle[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	return begin(ctx, f).wait(ctx)
}

// postClientAuthenticated POSTs form to endpoint with the agent's client
// assertion and no DPoP proof, as Device Sign-In's device authorization
// request needs (spec 4.6, A-06). It returns the 200 body, or the Company's
// error as an *Error. The endpoint must be one of the Company's.
func (c *Company) postClientAuthenticated(ctx context.Context, endpoint string, form url.Values) ([]byte, error) {
	if c.meta == nil {
		return nil, ErrNoAuth
	}
	u, err := c.agent.ParseURL(endpoint)
	if err != nil {
		return nil, err
	}
	if !c.ownsURL(u) {
		return nil, fmt.Errorf("%w: %s is not an origin the Company's documents name", ErrForeignHost, originOf(u))
	}
	return c.agent.postForm(ctx, c, endpoint, nil, func() (url.Values, error) {
		f := url.Values{}
		for k, v := range form {
			f[k] = slices.Clone(v)
		}
		return f, nil
	})
}
