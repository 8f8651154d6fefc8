// Package hooks is where the root package poppy lends its building blocks to
// the SDK's own subpackages without exporting them to users: posting
// client-authenticated forms, completing a grant, signing a JWT with the
// agent's key. Package poppy sets every hook in its init; the subpackages
// call them through the typed wrappers of package internal/sdk, never
// directly.
//
// The hooks are typed with any because this package cannot import poppy
// (poppy imports it). Each comment names the concrete types.
package hooks

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

var (

	// CompleteSignIn: func(ctx, s *poppy.Session, grant url.Values, opts *poppy.SignInOptions) (*poppy.SignInResult, error)
	CompleteSignIn func(ctx context.Context, s any, grant url.Values, opts any) (any, error)

	// AcceptSignIn: func(ctx, s *poppy.Session, tokenResponse []byte, opts *poppy.SignInOptions) (*poppy.SignInResult, error)
	AcceptSignIn func(ctx context.Context, s any, tokenResponse []byte, opts any) (any, error)

	// PostClientAuthenticated: func(ctx, c *poppy.Company, endpoint string, form url.Values) ([]byte, error)
	PostClientAuthenticated func(ctx context.Context, c any, endpoint string, form url.Values) ([]byte, error)

	// DirectHTTPClient: func(s *poppy.Session) *http.Client
	DirectHTTPClient func(s any) *http.Client

	// BoundHTTPClient: func(s *poppy.Session, sessionID string) *http.Client
	BoundHTTPClient func(s any, sessionID string) *http.Client

	// RestartSession: func(ctx, s *poppy.Session, ended string) error
	RestartSession func(ctx context.Context, s any, ended string) error

	// DeviceDurations: func(interval, expiresIn string) (time.Duration, time.Duration, error)
	DeviceDurations func(interval, expiresIn string) (time.Duration, time.Duration, error)
)
