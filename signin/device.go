package signin

// Device Sign-In (spec 4.6, RFC 8628).
//
// The device authorization request carries the client assertion and no
// proof. The User sees the verification URI and user code; the
// device code stays inside this function (PA-4.6-03). Polls carry
// session_id, the client assertion and a proof (through
// internal/sdk.CompleteSignIn), every interval seconds: 5 by default, and
// 5 more after each slow_down (RFC 8628 section 3.5). A poll answered
// invalid_session (the Company ended the Session) starts a new Session and
// the polling goes on with it, the interval apart as before: the device
// code is not tied to a Session until it is exchanged (PA-4.2-16).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/sdk"
)

const (
	slowDownStep    = 5 * time.Second
	grantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"
	// maxRestarts bounds how many times one sign-in starts a new Session
	// because the Company answered invalid_session.
	maxRestarts = 2
)

type deviceAuthorization struct {
	DeviceCode              string          `json:"device_code"`
	UserCode                string          `json:"user_code"`
	VerificationURI         string          `json:"verification_uri"`
	VerificationURIComplete string          `json:"verification_uri_complete"`
	ExpiresIn               json.RawMessage `json:"expires_in"`
	Interval                json.RawMessage `json:"interval"`
}

// maxUserCode bounds the user_code shown to the User.
const maxUserCode = 64

// parseDeviceAuthorization reads a device authorization response
// (RFC 8628 section 3.2), a Company's input: the codes and the URI are
// required; the URIs must pass the module's one URL check (absolute
// HTTPS with a host; http:// on loopback only with
// UnsafeAllowLoopbackHTTP), since the User opens them; the user_code the
// User sees is short and holds no control characters, so it can't drive a
// terminal; interval and expires_in go through the SDK's one duration
// rule (sdk.DeviceDurations): both are honoured as sent, a huge value
// can't overflow into a busy loop, an interval longer than expires_in is
// refused, and a missing expires_in, which RFC 8628 requires, can't make
// the agent poll until ctx ends.
func parseDeviceAuthorization(a *poppy.Agent, body []byte) (*deviceAuthorization, time.Duration, time.Duration, error) {
	var da deviceAuthorization
	if err := json.Unmarshal(body, &da); err != nil || da.DeviceCode == "" || da.UserCode == "" || da.VerificationURI == "" {
		return nil, 0, 0, errors.New("signin: invalid device authorization response")
	}
	if len(da.UserCode) > maxUserCode || strings.ContainsFunc(da.UserCode, unicode.IsControl) || !utf8.ValidString(da.UserCode) {
		return nil, 0, 0, errors.New("signin: invalid device authorization response: unusable user_code")
	}
	for _, raw := range []string{da.VerificationURI, da.VerificationURIComplete} {
		if raw == "" {
			continue
		}
		if _, err := a.ParseURL(raw); err != nil {
			return nil, 0, 0, fmt.Errorf("signin: verification URI: %w", err)
		}
	}
	interval, lifetime, err := sdk.DeviceDurations(string(da.Interval), string(da.ExpiresIn)) // PA-4.6-05
	if err != nil {
		return nil, 0, 0, err
	}
	return &da, interval, lifetime, nil
}

// Device signs the Session in with Device Sign-In: it shows the User a link
// and a code through p, then polls until the User approves or declines, the
// code expires, or ctx ends. A stored Account Token that covers the scopes
// is used instead, without asking the User.
func Device(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions, p UserPrompter) (*poppy.SignInResult, error) {
	if res, err := prepare(ctx, sess, "device", opts); res != nil || err != nil {
		return res, err
	}
	c := sess.Company()
	clock := c.Agent().Clock()
	// PA-4.6-01
	form := url.Values{"scope": {scopeString(opts.Scopes)}}
	if rs := c.Resources(); len(rs) > 0 {
		form["resource"] = rs // RFC 8707 section 2.1, as for Direct Sign-In
	}
	body, err := sdk.PostClientAuthenticated(ctx, c, c.Metadata().DeviceAuthorizationEndpoint, form)
	if err != nil {
		return nil, err
	}
	da, interval, lifetime, err := parseDeviceAuthorization(c.Agent(), body)
	if err != nil {
		return nil, err
	}
	start := clock.Now()
	expires := start.Add(lifetime)
	// PA-4.6-02: exactly what the Company returned; never the device code.
	if err := p.ShowCode(ctx, &CodePrompt{
		Company: c.Name(), VerificationURI: da.VerificationURI, UserCode: da.UserCode,
		VerificationURIComplete: da.VerificationURIComplete, Expires: expires, Scopes: describe(c, opts.Scopes),
	}); err != nil {
		return nil, err
	}
	grant := url.Values{"grant_type": {grantDeviceCode}, "device_code": {da.DeviceCode}}
	restarts := 0
	for {
		// PA-4.6-11: stop at expires_in, whatever the Company says.
		if !clock.Now().Add(interval).Before(expires.Add(time.Nanosecond)) {
			return nil, ErrDeviceCodeExpired
		}
		// PA-4.6-04: never sooner than interval after the previous poll.
		if err := clock.Sleep(ctx, interval); err != nil {
			return nil, err
		}
		polled := sess.ID()
		res, err := sdk.CompleteSignIn(ctx, sess, grant, opts)
		if err == nil {
			return res, nil // PA-4.6-08
		}
		var pe *poppy.Error
		if !errors.As(err, &pe) {
			return nil, err
		}
		if restarts > 0 && pe.Code == "invalid_grant" {
			// The Company used the device code up when it refused the
			// ended Session: the User would have to approve again.
			return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
		}
		switch pe.Code {
		case "invalid_session": // PA-4.2-16
			// The Session has ended: poll on a new one; the User's
			// approval is for the device code, not for the Session.
			if restarts++; restarts > maxRestarts {
				return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
			}
			if err := sdk.RestartSession(ctx, sess, polled); err != nil {
				return nil, err
			}
		case "authorization_pending": // PA-4.6-06
		case "slow_down": // PA-4.6-07
			interval += slowDownStep // the loop stops at expires_in
		case "access_denied": // PA-4.6-09
			return nil, because(ErrAccessDenied, err)
		case "expired_token": // PA-4.6-10
			return nil, because(ErrDeviceCodeExpired, err)
		default:
			return nil, err
		}
		logger(sess).DebugContext(ctx, "signin: device sign-in pending", "response", pe.Code, "interval", interval)
	}
}
