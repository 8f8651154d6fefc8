package poppy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/companytext"
	"github.com/poppyproto/poppy/internal/wire"
)

// Sentinel errors for the states callers branch on. An [*Error] from a
// Company matches the sentinel of its Code with [errors.Is].
var (
	// Discovery (spec 3).
	ErrInsecureURL                = errors.New("poppy: URL is not HTTPS")
	ErrInsecureRedirect           = errors.New("poppy: redirect to a non-HTTPS URL")
	ErrTooManyRedirects           = errors.New("poppy: too many redirects")
	ErrResponseTooLarge           = bounded.ErrTooLarge
	ErrInvalidDocument            = errors.New("poppy: invalid poppy.json document")
	ErrUnsupportedProtocolVersion = errors.New("poppy: unsupported protocol major version")
	ErrDomainMismatch             = errors.New("poppy: organization.domain does not match the requested domain")
	ErrNoAuth                     = errors.New("poppy: Company offers no Sessions (poppy.json has no auth)")
	ErrInvalidMetadata            = errors.New("poppy: invalid OAuth server metadata")
	ErrIssuerMismatch             = errors.New("poppy: issuer does not match auth.issuer")
	ErrDomainNotListed            = errors.New("poppy: poppy_domains does not list the domain")

	// Sessions and tokens (spec 4.1-4.3).
	ErrInvalidClient        = errors.New("poppy: invalid_client")
	ErrInvalidGrant         = errors.New("poppy: invalid_grant")
	ErrInvalidSession       = errors.New("poppy: invalid_session")
	ErrAccountMismatch      = errors.New("poppy: account_mismatch")
	ErrInvalidScope         = errors.New("poppy: invalid_scope")
	ErrInvalidTarget        = errors.New("poppy: invalid_target")
	ErrInvalidDPoPProof     = errors.New("poppy: invalid_dpop_proof")
	ErrDPoPNonce            = errors.New("poppy: use_dpop_nonce")
	ErrRateLimited          = errors.New("poppy: rate_limited")
	ErrInvalidToken         = errors.New("poppy: invalid_token")
	ErrSignInRequired       = errors.New("poppy: sign_in_required")
	ErrInsufficientScope    = errors.New("poppy: insufficient_scope")
	ErrExtensionRequired    = errors.New("poppy: extension_required")
	ErrUnexpectedTokenType  = errors.New("poppy: unexpected token_type")
	ErrInvalidTokenResponse = errors.New("poppy: invalid token response")
	ErrNoSession            = errors.New("poppy: no Session")
	ErrForeignHost          = errors.New("poppy: host is not one of the Company's")
	// ErrTokenInURL: a request's URL carries a token the Session holds
	// (spec 4.3: never in a URL); nothing was sent.
	ErrTokenInURL = errors.New("poppy: refusing to send a request whose URL carries a token (spec 4.3)")
	// ErrUnsupportedDPoPAlgorithm: the Company's DPoP challenge lists the
	// proof algorithms it accepts (algs, RFC 9449 section 7.1), and ES256,
	// the one the SDK signs with, is not among them: no retry can
	// help (PA-6-04). Error.Algs holds what it accepts.
	ErrUnsupportedDPoPAlgorithm = errors.New("poppy: the Company accepts no DPoP proof algorithm the SDK signs with (ES256)")

	// Browser Sessions (spec 5).
	//
	// ErrReturnTo: a browser assertion's return_to is not an https URL on
	// the Company's website (PA-5-07). Nothing was signed.
	ErrReturnTo = errors.New("poppy: return_to is not an https URL on the Company's domain")
	// ErrNoBrowserSessionEndpoint: the Company lists no
	// web.browser_session_endpoint, so there is nothing to join (PA-5-02;
	// package browser browses as a visitor instead).
	ErrNoBrowserSessionEndpoint = errors.New("poppy: the Company lists no browser_session_endpoint")
	// ErrBadBrowserSessionEndpoint: web.browser_session_endpoint is not a
	// plain https URL.
	ErrBadBrowserSessionEndpoint = errors.New("poppy: bad browser_session_endpoint")
)

// codeSentinels maps protocol error codes to their sentinels.
var codeSentinels = map[string]error{
	"invalid_client":     ErrInvalidClient,
	"invalid_grant":      ErrInvalidGrant,
	"invalid_session":    ErrInvalidSession,
	"account_mismatch":   ErrAccountMismatch,
	"invalid_scope":      ErrInvalidScope,
	"invalid_target":     ErrInvalidTarget,
	"invalid_dpop_proof": ErrInvalidDPoPProof,
	"use_dpop_nonce":     ErrDPoPNonce,
	"rate_limited":       ErrRateLimited,
	"invalid_token":      ErrInvalidToken,
	"sign_in_required":   ErrSignInRequired,
	"insufficient_scope": ErrInsufficientScope,
	"extension_required": ErrExtensionRequired,
}

// Error is an error a Company returned: an OAuth error response (spec 4.2),
// a WWW-Authenticate challenge (spec 4.3, 6), a 429 (spec 4.3) or an
// extension_required refusal (spec 3.3). It never holds a token, proof or
// credential: Description is the Company's text, cut short and stripped of
// control characters.
type Error struct {
	// Endpoint is where the request went: scheme, host and path, no query.
	Endpoint string
	// Status is the HTTP status code.
	Status int
	// Code is the OAuth or protocol error code, such as "invalid_grant".
	Code string
	// Description is the Company's error_description, if any.
	Description string
	// Scope lists the scopes of a WWW-Authenticate scope attribute
	// (insufficient_scope names the scopes required, A-21).
	Scope []string
	// RetryAfter is the wait a 429 or 503 asked for, zero if none.
	RetryAfter time.Duration
	// Extension names the extension an extension_required refusal needs.
	Extension string
	// SignInTypes are the sign-in types the Company offers that can grant
	// what a sign_in_required or insufficient_scope refusal asks for
	// (spec 4.4), in the order "direct", "device", "mediated".
	SignInTypes []string
	// Algs are the DPoP proof algorithms the Company's DPoP challenge says
	// it accepts (algs, RFC 9449 section 7.1), when it names them. Without
	// "ES256" among them the Error matches ErrUnsupportedDPoPAlgorithm.
	Algs []string
}

// excludesES256 reports whether the Company named its DPoP algorithms and
// ES256 is not one of them.
func (e *Error) excludesES256() bool {
	return e.Algs != nil && !slices.Contains(e.Algs, "ES256")
}

// Error returns a one-line description.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("poppy: ")
	if e.Endpoint != "" {
		b.WriteString(e.Endpoint)
		b.WriteString(": ")
	}
	if e.Code != "" {
		b.WriteString(e.Code)
	} else {
		b.WriteString("error")
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Extension != "" {
		fmt.Fprintf(&b, " extension %q", e.Extension)
	}
	if len(e.Scope) > 0 {
		fmt.Fprintf(&b, " scope %q", strings.Join(e.Scope, " "))
	}
	if len(e.SignInTypes) > 0 {
		fmt.Fprintf(&b, " (sign in with %s)", strings.Join(e.SignInTypes, " or "))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " retry after %s", e.RetryAfter)
	}
	if e.excludesES256() {
		fmt.Fprintf(&b, " (DPoP algs %q: not ES256, the SDK's)", strings.Join(e.Algs, " "))
	}
	if e.Description != "" {
		b.WriteString(": ")
		b.WriteString(e.Description)
	}
	return b.String()
}

// Is reports whether target is the sentinel for e's Code.
func (e *Error) Is(target error) bool {
	if target == ErrUnsupportedDPoPAlgorithm {
		return e.excludesES256()
	}
	s, ok := codeSentinels[e.Code]
	return ok && s == target
}

// As lets errors.As find an ExtensionRequiredError for an
// extension_required refusal: the target may be an *ExtensionRequiredError
// or an **ExtensionRequiredError.
func (e *Error) As(target any) bool {
	if e.Code != "extension_required" {
		return false
	}
	switch t := target.(type) {
	case *ExtensionRequiredError:
		*t = ExtensionRequiredError{Extension: e.Extension, Err: e}
		return true
	case **ExtensionRequiredError:
		*t = &ExtensionRequiredError{Extension: e.Extension, Err: e}
		return true
	}
	return false
}

// ExtensionRequiredError is what errors.As finds for a Company's
// extension_required refusal (spec 3.3): the request needs an extension the
// agent does not list in its client metadata. Retrying does not help.
// Either form works:
//
//	var xr poppy.ExtensionRequiredError   // or *poppy.ExtensionRequiredError
//	if errors.As(err, &xr) { … xr.Extension … }
type ExtensionRequiredError struct {
	// Extension is the extension the Company requires, e.g. "operations".
	Extension string
	// Err is the Company's answer.
	Err *Error
}

// Error names the extension the Company requires.
func (e ExtensionRequiredError) Error() string {
	return fmt.Sprintf("poppy: extension_required: %q", e.Extension)
}

// Unwrap returns the Company's *Error, so that errors.Is(xr,
// ErrExtensionRequired) holds.
func (e ExtensionRequiredError) Unwrap() error {
	if e.Err == nil {
		return nil
	}
	return e.Err
}

// aboutError is an error of this package about one named thing, such as
// the identity's client_id: "poppy: client_id: URL is not HTTPS: …", with
// the package prefix once.
type aboutError struct {
	what string
	err  error
}

func (e *aboutError) Error() string {
	return "poppy: " + e.what + ": " + strings.TrimPrefix(e.err.Error(), "poppy: ")
}

func (e *aboutError) Unwrap() error { return e.err }

// about returns err as an error about what.
func about(what string, err error) error { return &aboutError{what: what, err: err} }

// maxDescription bounds the Company's text kept in an Error.
const maxDescription = 200

// cleanText returns untrusted text from a Company fit for an error string:
// one line, nothing that could drive a terminal or reorder or hide text
// (internal/companytext), at most maxDescription bytes.
func cleanText(s string) string { return companytext.Line(s, maxDescription) }

// configError reports bad input from the caller.
func configError(format string, args ...any) error {
	return fmt.Errorf("poppy: "+format, args...)
}

// unwrapURLError drops *url.Error's copy of the URL, keeping the cause.
func unwrapURLError(err error) error { return wire.URLErrorCause(err) }
