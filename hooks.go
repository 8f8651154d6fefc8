package poppy

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/poppyproto/poppy/internal/hooks"
)

// The building blocks the SDK's subpackages share with this package but
// users don't get (see internal/hooks and internal/sdk).
func init() {
	hooks.SignJWT = func(id any, typ string, claims []byte) (string, error) {
		return id.(*Identity).signJWT(typ, claims)
	}
	hooks.CompleteSignIn = func(ctx context.Context, s any, grant url.Values, opts any) (any, error) {
		r, err := s.(*Session).completeSignIn(ctx, grant, opts.(*SignInOptions))
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	hooks.AcceptSignIn = func(ctx context.Context, s any, body []byte, opts any) (any, error) {
		r, err := s.(*Session).acceptSignIn(ctx, body, opts.(*SignInOptions))
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	hooks.PostClientAuthenticated = func(ctx context.Context, c any, endpoint string, form url.Values) ([]byte, error) {
		return c.(*Company).postClientAuthenticated(ctx, endpoint, form)
	}
	hooks.DirectHTTPClient = func(s any) *http.Client { return s.(*Session).directHTTPClient() }
	hooks.BoundHTTPClient = func(s any, sessionID string) *http.Client {
		return s.(*Session).boundHTTPClient(sessionID)
	}
	hooks.RestartSession = func(ctx context.Context, s any, ended string) error {
		return s.(*Session).restart(ctx, ended)
	}
	hooks.ParseURL = func(a any, raw string) (*url.URL, error) { return a.(*Agent).parseURL(raw) }
	hooks.DeviceDurations = deviceDurations
	hooks.RenewToken = func(ctx context.Context, s any, opts any, used string) (any, error) {
		o := opts.(*TokenOptions)
		if o.Bearer && o.Resource == "" {
			return nil, configError("Token: a Bearer token needs the MCP server's url as Resource")
		}
		return s.(*Session).token(ctx, o.key(), used)
	}
	hooks.ResourceHTTPClient = func(s any, resource string) *http.Client {
		return s.(*Session).resourceHTTPClient(resource)
	}
	hooks.Secrets = func(ctx context.Context, s any) []string { return s.(*Session).secrets(ctx) }
	hooks.FetchDocument = func(ctx context.Context, a any, rawURL, what string, limit int64) ([]byte, error) {
		ag := a.(*Agent)
		if limit <= 0 {
			limit = ag.opts.MaxResponseBytes
		}
		return ag.cache.get(ctx, ag, rawURL, what, limit)
	}
	hooks.RetryWait = func(a any, retryAfter time.Duration, attempt int) (time.Duration, bool) {
		return a.(*Agent).rateWait(retryAfter, attempt)
	}
}

// secrets returns the values of the Session Tokens the Session holds and of
// the Account Token it is signed in with, so that the tool runtime can make
// sure none reaches a model (PA-4.8-08). It sends no request.
func (s *Session) secrets(ctx context.Context) []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.tokens)+1)
	for _, t := range s.tokens {
		out = append(out, t.value)
	}
	account := s.rec.Account
	s.mu.Unlock()
	if account == "" {
		account = DefaultAccount
	}
	if t, err := s.AccountToken(ctx, account); err == nil {
		out = append(out, t.value)
	}
	return out
}
