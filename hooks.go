package poppy

import (
	"context"
	"net/http"
	"net/url"

	"github.com/poppyproto/poppy/internal/hooks"
)

// The building blocks the SDK's subpackages share with this package but
// users don't get (see internal/hooks and internal/sdk).
func init() {
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
	hooks.DeviceDurations = deviceDurations
}
