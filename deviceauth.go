package poppy

// Device Sign-In's token-endpoint steps (spec 4.6, RFC 8628), beside the
// Session whose grant they complete, as x/oauth2 keeps deviceauth.go beside
// Config. Package signin runs the whole sign-in with them: it shows the
// User the code and polls, interval apart, until the User is done.
//
// The device authorization request carries the client assertion and no
// proof. Its answer is a Company's input: the codes and the URI are
// required, the URIs pass the module's one URL check (the User opens
// them), the user_code is short and holds no control characters (the User
// sees it), and interval and expires_in go through the SDK's one duration
// rule (durations.go). The device code never leaves this file (PA-4.6-03).
// A poll carries session_id, the client assertion and a proof; one the
// Company answers invalid_session starts a new Session before it returns,
// so the next poll, with the same device code, goes out on the new one:
// the User's approval is for the device code, not for the Session
// (PA-4.2-16).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxUserCode bounds the user_code shown to the User.
const maxUserCode = 64

// DeviceAuthorization is a Company's answer to a device authorization
// request (RFC 8628 section 3.2), checked: what the User needs to see and
// how often the agent may poll. The device code stays inside it, never
// shown, formatted or logged (PA-4.6-03).
type DeviceAuthorization struct {
	// UserCode is the code the User enters: at most 64 bytes of UTF-8
	// without control characters.
	UserCode string
	// VerificationURI is where the User enters it;
	// VerificationURIComplete, when the Company gave one, a link that
	// carries the code (show it as a link or a QR code). Both passed
	// Agent.ParseURL.
	VerificationURI, VerificationURIComplete string
	// Interval is the least time between two polls, as the Company sent
	// it (PA-4.6-04), 5 s when it sent none (PA-4.6-05). A slow_down
	// answer asks the poller to add 5 s to it (RFC 8628 section 3.5).
	Interval time.Duration
	// Expires is when the device code expires, by the Agent's clock:
	// expires_in after the answer, read as at most 30 days. Polling stops
	// there, whatever the Company answers (PA-4.6-11).
	Expires time.Time

	deviceCode string
	sess       *Session
	opts       SignInOptions
}

// String describes the authorization without the device code.
func (d *DeviceAuthorization) String() string {
	return fmt.Sprintf("poppy.DeviceAuthorization(user_code %q at %s, expires %s, device code redacted)",
		d.UserCode, d.VerificationURI, d.Expires.UTC().Format(time.RFC3339))
}

// GoString is String.
func (d *DeviceAuthorization) GoString() string { return d.String() }

// Format writes String for every verb.
func (d *DeviceAuthorization) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(d.String())) }

// LogValue logs String.
func (d *DeviceAuthorization) LogValue() slog.Value { return slog.StringValue(d.String()) }

// AuthorizeDevice starts a Device Sign-In of the Session for opts.Scopes
// (spec 4.6, PA-4.6-01): it sends the device authorization request, with
// the client assertion and no proof, naming every resource the
// Company lists (Company.Resources, RFC 8707 section 2.1), and returns the
// Company's checked answer. Show the User UserCode and VerificationURI,
// then call PollDevice, Interval apart, until it succeeds or Expires.
// Package signin's Device does all of it.
func (s *Session) AuthorizeDevice(ctx context.Context, opts *SignInOptions) (*DeviceAuthorization, error) {
	if s == nil {
		return nil, ErrNoSession
	}
	if opts == nil || len(opts.Scopes) == 0 {
		return nil, configError("AuthorizeDevice: no scopes")
	}
	c := s.company
	if c.meta.DeviceAuthorizationEndpoint == "" {
		return nil, fmt.Errorf("%w: the Company has no device_authorization_endpoint", ErrNoAuth)
	}
	form := url.Values{"scope": {strings.Join(opts.Scopes, " ")}} // PA-4.6-01
	if rs := c.Resources(); len(rs) > 0 {
		form["resource"] = rs // RFC 8707 section 2.1, as for Direct Sign-In
	}
	body, err := c.postClientAuthenticated(ctx, c.meta.DeviceAuthorizationEndpoint, form)
	if err != nil {
		return nil, err
	}
	da, lifetime, err := parseDeviceAuthorization(s.agent, body)
	if err != nil {
		return nil, err
	}
	da.Expires = s.agent.clock.Now().Add(lifetime)
	da.sess = s
	da.opts = *opts
	da.opts.Scopes = slices.Clone(opts.Scopes)
	return da, nil
}

// deviceAuthorizationResponse is RFC 8628 section 3.2's answer.
type deviceAuthorizationResponse struct {
	DeviceCode              string          `json:"device_code"`
	UserCode                string          `json:"user_code"`
	VerificationURI         string          `json:"verification_uri"`
	VerificationURIComplete string          `json:"verification_uri_complete"`
	ExpiresIn               json.RawMessage `json:"expires_in"`
	Interval                json.RawMessage `json:"interval"`
}

// parseDeviceAuthorization reads and checks a device authorization
// response, and returns it with the device code's lifetime (expires_in).
func parseDeviceAuthorization(a *Agent, body []byte) (*DeviceAuthorization, time.Duration, error) {
	var r deviceAuthorizationResponse
	if err := json.Unmarshal(body, &r); err != nil || r.DeviceCode == "" || r.UserCode == "" || r.VerificationURI == "" {
		return nil, 0, errors.New("poppy: invalid device authorization response")
	}
	if len(r.UserCode) > maxUserCode || strings.ContainsFunc(r.UserCode, unicode.IsControl) || !utf8.ValidString(r.UserCode) {
		return nil, 0, errors.New("poppy: invalid device authorization response: unusable user_code")
	}
	for _, raw := range []string{r.VerificationURI, r.VerificationURIComplete} {
		if raw == "" {
			continue
		}
		if _, err := a.ParseURL(raw); err != nil {
			return nil, 0, fmt.Errorf("poppy: device authorization response: verification URI: %w", err)
		}
	}
	interval, lifetime, err := deviceDurations(string(r.Interval), string(r.ExpiresIn)) // PA-4.6-05
	if err != nil {
		return nil, 0, err
	}
	return &DeviceAuthorization{UserCode: r.UserCode, VerificationURI: r.VerificationURI,
		VerificationURIComplete: r.VerificationURIComplete, Interval: interval,
		deviceCode: r.DeviceCode}, lifetime, nil
}

// PollDevice polls once for the Device Sign-In da began (RFC 8628 section
// 3.4): it sends the device code with the Session's session_id, the client
// assertion and a proof. When the User has approved, the Account Token is
// stored and the Session signed in (PA-4.6-08). Otherwise it returns the
// Company's *Error: authorization_pending (poll again, PA-4.6-06),
// slow_down (poll again 5 s later than before, PA-4.6-07), access_denied
// (PA-4.6-09), expired_token (PA-4.6-10), or invalid_session: the Company
// ended the Session, and PollDevice has started a new one
// (OnSessionReplaced) so that the next poll, with the same device code,
// goes out on it (PA-4.2-16). It does not wait: the caller keeps polls
// Interval apart (PA-4.6-04) and stops at Expires (PA-4.6-11). When ctx
// ends first, PollDevice returns ctx's error and the poll finishes without
// it: an approval it brings is kept, and the Session signed in.
func (s *Session) PollDevice(ctx context.Context, da *DeviceAuthorization) (*SignInResult, error) {
	if s == nil {
		return nil, ErrNoSession
	}
	if da == nil || da.sess != s {
		return nil, configError("PollDevice: a DeviceAuthorization of another Session")
	}
	grant := url.Values{"grant_type": {grantDeviceCode}, "device_code": {da.deviceCode}}
	return s.completeSignIn(ctx, grant, &da.opts)
}
