// Package signin signs a User in to their account at a Company (spec 4.4 to
// 4.7) in the three ways the protocol defines:
//
//   - [Direct]: the OAuth authorization code flow with PKCE. The User signs
//     in on the Company's page in their browser and is sent back to the
//     agent's redirect URI, served by [Direct.Handler].
//   - [Device]: the OAuth device authorization grant. The User opens a link
//     on any device and enters a code the agent shows.
//   - [Mediated]: the agent sends credentials the User gave it to the
//     Company's mediated sign-in endpoint, and only there.
//
// The User is reached through a [UserPrompter]: the application decides how
// to show a link or a code and how to ask for credentials. Before any
// sign-in, each function first looks for a stored Account Token that covers
// the scopes and uses it instead (spec 4.4, 4.8); a sign-in that fails or
// is declined leaves every token as it was.
//
// All three end the same way: the Account Token is stored, the Session is
// signed in, and the result reports the scopes the User granted, which may
// be fewer than those asked for (check with [poppy.SignInResult.Require]).
//
// A sign-in for scopes the Session already holds, signed in to that
// account with a Session Token not yet due for renewal, returns at once
// with Reused set and sends nothing. That is a local check: right after
// the Company disconnected the User, it still reports Reused, and the
// next API call answers sign_in_required. A caller that must know asks
// the Company with [poppy.SignInOptions.Verify], at the cost of one token
// request: the Account Token is sent, and if the Company refuses it the
// User is asked to sign in at once.
//
// # Sessions the Company has ended
//
// If the Company ended the Session (a stale keystore, or a Company that
// ends Sessions at sign-out) the sign-in is completed on a new Session,
// OnSessionReplaced is called, and the User is not asked again (PA-4.2-16):
//
//   - Device: a poll answered invalid_session starts a new Session, and
//     polling goes on with the same device code, interval apart.
//   - Direct: an exchange answered invalid_session starts a new Session and
//     exchanges the same code there once.
//   - Mediated: the transport replaces the Session before the credentials
//     are accepted. If the Session ends while the User types a one-time
//     code, the sign-in ended with it: the code is never sent with another
//     Session's token (PA-4.7-09).
//
// A Company may use up the device or authorization code when it answers
// invalid_session. The SDK then does not ask the User again on its own:
// the sign-in fails with [ErrSessionEnded] (wrapping the Company's
// invalid_grant), the Session is the new one, and the caller decides
// whether to start a new sign-in. The same error ends a Mediated Sign-In
// whose Session ended during the one-time code.
//
// # Decisions on the specification's open points
//
// All of them are in docs/decisions.md; this package's are:
//
//   - PKCE uses S256 only, with a 256-bit verifier. The Account Token
//     from a Direct Sign-In is stored for the User whose Session started it.
//   - a redirect without iss is refused, before
//     access_denied is even looked at: RFC 9207 is what stops a mix-up.
//   - interval and expires_in are honoured as the Company sends them
//     (PA-4.6-04): polls are at least interval apart, however long, and
//     stop at expires_in even if the Company never answers expired_token,
//     or when the caller's context ends. An interval that is not a count
//     of at least one second (absent, 0, negative, 1e-9) means 5 s; one
//     longer than expires_in, and a response without a positive
//     expires_in (RFC 8628 section 3.2), are refused before the User sees
//     a code; an expires_in over 30 days is read as 30 days. slow_down
//     adds 5 s to every later poll.
//   - a Mediated Sign-In error other than the four statuses is read as
//     an OAuth error body ({"error": …}) whatever its HTTP status.
package signin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/poppyproto/poppy"
)

// Errors of sign-in, for the outcomes a caller branches on. The
// Company's refusals (invalid_grant, invalid_scope, ...) are its
// *poppy.Error, matching poppy's sentinels.
var (
	// ErrSignInTypeUnavailable: the Company does not offer the sign-in
	// type for the scopes asked: try another (spec 4.4).
	ErrSignInTypeUnavailable = errors.New("signin: the Company does not offer this sign-in type for these scopes")
	// ErrAccessDenied: the User declined (access_denied).
	ErrAccessDenied = errors.New("signin: the User declined (access_denied)")
	// ErrSignInFailed: the sign-in failed at the Company, for no reason
	// the SDK can tell apart.
	ErrSignInFailed = errors.New("signin: sign-in failed")
	// ErrSignInExpired: the sign-in, or its device code, expired before
	// the User finished: start again.
	ErrSignInExpired = errors.New("signin: the sign-in expired; start again")
	// ErrSessionEnded: the Company ended the Session during the sign-in,
	// and the sign-in could not be completed on a new Session (PA-4.2-16):
	// start it again.
	ErrSessionEnded = errors.New("signin: the Company ended the Session during the sign-in, and the sign-in could not be completed on a new Session; start it again")
)

// Errors no caller branches on: each says what went wrong, and the tests
// match them (export_test.go). A callback that fails them is refused
// (Handler shows the User why).
var (
	errStateMismatch     = errors.New("signin: state does not match the sign-in")
	errIssuerMissing     = errors.New("signin: the redirect has no iss (RFC 9207)")
	errDeviceCodeExpired = fmt.Errorf("%w: the device code expired before the User finished", ErrSignInExpired)
	errUnknownSignIn     = errors.New("signin: no pending sign-in with this state")
	errSignInInProgress  = errors.New("signin: this sign-in is being completed")
)

// UserPrompter reaches the User. Each method may block until the User has
// acted, and must return when ctx is done.
type UserPrompter interface {
	// OpenURL asks the User to open a Direct Sign-In URL in their browser:
	// in a new tab, a popup, or as a link sent to their phone.
	OpenURL(ctx context.Context, p *URLPrompt) error
	// ShowCode shows the User a Device Sign-In link and code.
	ShowCode(ctx context.Context, p *CodePrompt) error
	// Credentials asks the User for the fields of a Mediated Sign-In.
	Credentials(ctx context.Context, p *CredentialsPrompt) (*Credentials, error)
	// OneTimeCode asks the User for the one-time code the Company sent them.
	OneTimeCode(ctx context.Context, p *OneTimeCodePrompt) (string, error)
}

// URLPrompt is what the User needs to start a Direct Sign-In.
type URLPrompt struct {
	Company string // organization.name
	URL     string // the authorization URL to open
	Scopes  []Scope
}

// CodePrompt is what the User needs for a Device Sign-In (spec 4.6). The
// device code itself is never in it.
type CodePrompt struct {
	Company                 string
	VerificationURI         string
	UserCode                string
	VerificationURIComplete string // may be empty; show it as a link or QR code
	Expires                 time.Time
	Scopes                  []Scope
}

// Scope is a scope asked for, with the Company's description of its own
// scopes (auth.custom_scopes) or the protocol's for poppy:read and
// poppy:write.
type Scope struct {
	Name        string
	Description string
}

// CredentialsPrompt lists the credentials a Mediated Sign-In needs, in the
// Company's order.
type CredentialsPrompt struct {
	Company string
	Fields  []poppy.MediatedField
	Scopes  []Scope
}

// OneTimeCodePrompt asks for the code the Company sent the User.
type OneTimeCodePrompt struct {
	Company string
	SentTo  string    // how the Company sent it, e.g. "Text to the phone number ending in 71"
	Expires time.Time // zero if the Company gave no expiry
	Retry   bool      // the previous code was wrong
}

// PrompterFuncs is a UserPrompter made of functions; a nil function fails
// that kind of sign-in with an error naming it.
type PrompterFuncs struct {
	OpenURLFunc     func(ctx context.Context, p *URLPrompt) error
	ShowCodeFunc    func(ctx context.Context, p *CodePrompt) error
	CredentialsFunc func(ctx context.Context, p *CredentialsPrompt) (*Credentials, error)
	OneTimeCodeFunc func(ctx context.Context, p *OneTimeCodePrompt) (string, error)
}

// OpenURL calls OpenURLFunc, or fails naming it when it is nil.
func (f PrompterFuncs) OpenURL(ctx context.Context, p *URLPrompt) error {
	if f.OpenURLFunc == nil {
		return errors.New("signin: PrompterFuncs.OpenURLFunc is nil: the prompter cannot send the User to a Direct Sign-In page")
	}
	return f.OpenURLFunc(ctx, p)
}

// ShowCode calls ShowCodeFunc, or fails naming it when it is nil.
func (f PrompterFuncs) ShowCode(ctx context.Context, p *CodePrompt) error {
	if f.ShowCodeFunc == nil {
		return errors.New("signin: PrompterFuncs.ShowCodeFunc is nil: the prompter cannot show a Device Sign-In code")
	}
	return f.ShowCodeFunc(ctx, p)
}

// Credentials calls CredentialsFunc, or fails naming it when it is nil.
func (f PrompterFuncs) Credentials(ctx context.Context, p *CredentialsPrompt) (*Credentials, error) {
	if f.CredentialsFunc == nil {
		return nil, errors.New("signin: PrompterFuncs.CredentialsFunc is nil: the prompter cannot ask for Mediated Sign-In credentials")
	}
	return f.CredentialsFunc(ctx, p)
}

// OneTimeCode calls OneTimeCodeFunc, or fails naming it when it is nil.
func (f PrompterFuncs) OneTimeCode(ctx context.Context, p *OneTimeCodePrompt) (string, error) {
	if f.OneTimeCodeFunc == nil {
		return "", errors.New("signin: PrompterFuncs.OneTimeCodeFunc is nil: the prompter cannot ask for a one-time code")
	}
	return f.OneTimeCodeFunc(ctx, p)
}

// causeError is one of this package's sentinels caused by the Company's
// answer: it reads as the sentinel alone (the Company's error code would
// say the same again) and matches both with errors.Is and errors.As.
type causeError struct {
	sentinel error
	cause    error
}

func (e *causeError) Error() string   { return e.sentinel.Error() }
func (e *causeError) Unwrap() []error { return []error{e.sentinel, e.cause} }

// because returns sentinel, caused by the Company's error cause.
func because(sentinel, cause error) error { return &causeError{sentinel: sentinel, cause: cause} }

// protocolScopes describes the protocol's own scopes (spec 4.4).
var protocolScopes = map[string]string{
	"poppy:read":  "View account information, such as orders and bookings.",
	"poppy:write": "Make changes, such as exchanging an item or updating a booking.",
}

func describe(c *poppy.Company, scopes []string) []Scope {
	out := make([]Scope, 0, len(scopes))
	for _, s := range scopes {
		d, ok := c.ScopeDescription(s) // PA-4.4-04
		if !ok {
			d = protocolScopes[s]
		}
		out = append(out, Scope{Name: s, Description: d})
	}
	return out
}

// prepare checks opts and the type's availability, and uses a stored
// Account Token when one covers the scopes. It returns a non-nil result
// when no sign-in is needed.
func prepare(ctx context.Context, sess *poppy.Session, typ string, opts *poppy.SignInOptions) (*poppy.SignInResult, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	if opts == nil || len(opts.Scopes) == 0 {
		return nil, errors.New("signin: no scopes to sign in for")
	}
	for _, s := range opts.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\"\\") {
			return nil, fmt.Errorf("signin: invalid scope %q", s)
		}
	}
	// PA-4.4-15: an Account Token that covers the task is used instead.
	if res, ok, err := sess.UseAccountToken(ctx, opts); err != nil {
		return nil, err
	} else if ok {
		return res, nil
	}
	c := sess.Company()
	// PA-4.4-01, PA-4.4-05, PA-3.2-06: only a type the Company offers, with
	// its endpoint, and only the scopes it lists.
	if !slices.Contains(c.EligibleSignInTypes(opts.Scopes), typ) {
		return nil, fmt.Errorf("%w: %s for %q (eligible: %v)", ErrSignInTypeUnavailable, typ,
			strings.Join(opts.Scopes, " "), c.EligibleSignInTypes(opts.Scopes))
	}
	return nil, nil
}

func scopeString(scopes []string) string { return strings.Join(scopes, " ") } // PA-4.4-06

func logger(sess *poppy.Session) *slog.Logger { return sess.Company().Agent().Logger() }
