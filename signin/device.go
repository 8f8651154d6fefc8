package signin

// Device Sign-In (spec 4.6, RFC 8628).
//
// The protocol's two steps are the root's (poppy.Session.AuthorizeDevice
// and PollDevice, beside the Session whose grant they complete): the
// device authorization request, with the client assertion and no proof
// and each poll, with session_id, the client assertion and a
// proof. This file is the sign-in around them: the User sees the
// verification URI and user code, never the device code (PA-4.6-03), and
// polls go out every interval seconds, 5 by default, and 5 more after each
// slow_down (RFC 8628 section 3.5). A poll answered invalid_session (the
// Company ended the Session) has started a new Session, and the polling
// goes on with it, the interval apart as before: the device code is not
// tied to a Session until it is exchanged (PA-4.2-16).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/poppyproto/poppy"
)

const (
	slowDownStep = 5 * time.Second
	// maxRestarts bounds how many times one sign-in starts a new Session
	// because the Company answered invalid_session.
	maxRestarts = 2
)

// Device signs the Session in with Device Sign-In: it shows the User a link
// and a code through p, then polls until the User approves or declines, the
// code expires, or ctx ends. A stored Account Token that covers the scopes
// is used instead, without asking the User.
//
// The device authorization response is a Company's input, checked before
// the User sees anything (poppy.Session.AuthorizeDevice): interval and
// expires_in are honoured as sent, a huge value can't overflow into
// a busy loop, an interval longer than expires_in is refused, and a
// missing expires_in, which RFC 8628 requires, can't make the agent poll
// until ctx ends.
func Device(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions, p UserPrompter) (*poppy.SignInResult, error) {
	if res, err := prepare(ctx, sess, "device", opts); res != nil || err != nil {
		return res, err
	}
	c := sess.Company()
	clock := c.Agent().Clock()
	da, err := sess.AuthorizeDevice(ctx, opts) // PA-4.6-01
	if err != nil {
		return nil, err
	}
	// PA-4.6-02: exactly what the Company returned; never the device code.
	if err := p.ShowCode(ctx, &CodePrompt{
		Company: c.Name(), VerificationURI: da.VerificationURI, UserCode: da.UserCode,
		VerificationURIComplete: da.VerificationURIComplete, Expires: da.Expires, Scopes: describe(c, opts.Scopes),
	}); err != nil {
		return nil, err
	}
	interval, expires := da.Interval, da.Expires
	restarts := 0
	for {
		// PA-4.6-11: stop at expires_in, whatever the Company says.
		if !clock.Now().Add(interval).Before(expires.Add(time.Nanosecond)) {
			return nil, errDeviceCodeExpired
		}
		// PA-4.6-04: never sooner than interval after the previous poll.
		if err := clock.Sleep(ctx, interval); err != nil {
			return nil, err
		}
		res, err := sess.PollDevice(ctx, da)
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
			// The Session has ended, and PollDevice started a new one:
			// poll on it; the User's approval is for the device code,
			// not for the Session.
			if restarts++; restarts > maxRestarts {
				return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
			}
		case "authorization_pending": // PA-4.6-06
		case "slow_down": // PA-4.6-07
			interval += slowDownStep // the loop stops at expires_in
		case "access_denied": // PA-4.6-09
			return nil, because(ErrAccessDenied, err)
		case "expired_token": // PA-4.6-10
			return nil, because(errDeviceCodeExpired, err)
		default:
			return nil, err
		}
		logger(sess).DebugContext(ctx, "signin: device sign-in pending", "response", pe.Code, "interval", interval)
	}
}
