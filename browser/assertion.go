package browser

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/internal/sdk"
)

// AssertionType is the typ header of a browser assertion (spec 5 step 1).
const AssertionType = "poppy-browser+jwt"

// assertionLifetime is exp - iat of every browser assertion: the most the
// spec allows (PA-5-08), so that a slow browser start doesn't expire it.
const assertionLifetime = 60 * time.Second

// maxReturnTo bounds return_to: it travels in a JWT and a Location header.
const maxReturnTo = 2048

// Assertion is a signed browser assertion (spec 5 step 1). The signed JWT
// is a secret for its 60 seconds: String, GoString, Format and LogValue
// never show it; only [Assertion.Value] does, for the join page.
type Assertion struct {
	value string

	// Endpoint is the aud: the Company's web.browser_session_endpoint.
	Endpoint string
	// SessionID is the session_id of the Session the browser joins.
	SessionID string
	// ReturnTo is the page the Company opens after the join.
	ReturnTo string
	// IssuedAt and ExpiresAt are iat and exp; they are 60 s apart.
	IssuedAt, ExpiresAt time.Time
}

// Value returns the compact JWT.
func (a *Assertion) Value() string { return a.value }

// String describes the assertion without its value.
func (a *Assertion) String() string {
	return "browser.Assertion(aud=" + a.Endpoint + ", session_id=" + a.SessionID + ", redacted)"
}

// GoString is String.
func (a *Assertion) GoString() string { return a.String() }

// Format writes String for every verb.
func (a *Assertion) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.String())) }

// LogValue logs String.
func (a *Assertion) LogValue() slog.Value { return slog.StringValue(a.String()) }

// SignAssertion signs a browser assertion that joins a browser to sess and
// then opens returnTo (spec 5 step 1): typ poppy-browser+jwt, signed with
// the agent's current jwks_uri key (PA-5-03); iss the client_id, sub the
// User ID, iat, a 128-bit jti (PA-5-04); aud the Company's
// web.browser_session_endpoint (PA-5-05); session_id the Session's ID
// (PA-5-06); exp 60 s after iat (PA-5-08).
//
// returnTo is checked with [CheckReturnTo] before anything is signed
// (PA-5-07). A Company without the endpoint gets [ErrNoEndpoint].
//
// Hand the assertion only to a browser the agent controls (PA-5-11); [Browser.Join]
// does the whole join.
func SignAssertion(sess *poppy.Session, returnTo string) (*Assertion, error) {
	if sess == nil {
		return nil, errors.New("browser: SignAssertion needs a Session")
	}
	c := sess.Company()
	endpoint, err := endpointOf(c)
	if err != nil {
		return nil, err
	}
	if err := CheckReturnTo(c, returnTo); err != nil {
		return nil, err // PA-5-07: nothing signed
	}
	sid := sess.ID()
	if sid == "" {
		return nil, errors.New("browser: the Session has no session_id yet")
	}
	now := c.Agent().Clock().Now()
	exp := now.Add(assertionLifetime)
	id := c.Agent().Identity()
	claims := jose.NewClaims(512).
		String("iss", id.ClientID()). // PA-5-04
		String("sub", sess.UserID()). // PA-5-04
		String("aud", endpoint).      // PA-5-05
		String("session_id", sid).    // PA-5-06
		String("return_to", returnTo).
		Int("iat", now.Unix()).           // PA-5-04
		Int("exp", exp.Unix()).           // PA-5-08
		String("jti", jose.RandomID(16)). // PA-5-04: 128 random bits
		Bytes()
	v, err := sdk.SignJWT(id, AssertionType, claims) // PA-5-03
	if err != nil {
		return nil, fmt.Errorf("browser: signing the browser assertion: %w", err)
	}
	return &Assertion{value: v, Endpoint: endpoint, SessionID: sid, ReturnTo: returnTo,
		IssuedAt: time.Unix(now.Unix(), 0), ExpiresAt: time.Unix(exp.Unix(), 0)}, nil
}

// endpointOf returns the Company's web.browser_session_endpoint, checked
// to be an https URL whose host can appear in a Content-Security-Policy.
func endpointOf(c *poppy.Company) (string, error) {
	doc := c.Document()
	if doc == nil || doc.Web == nil || doc.Web.BrowserSessionEndpoint == "" {
		return "", ErrNoEndpoint
	}
	raw := doc.Web.BrowserSessionEndpoint
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || !plainHost(u.Host) || u.Fragment != "" || len(raw) > maxReturnTo {
		return "", fmt.Errorf("%w: web.browser_session_endpoint is not a plain https URL", ErrBadEndpoint)
	}
	return raw, nil
}

// plainHost reports whether hostport is a DNS name with an optional port,
// nothing a CSP source, a Location or a browser could read another way:
// labels of ASCII letters, digits and inner hyphens, 1 to 63 bytes each and
// at most 253 bytes in all, with an optional trailing dot; a port in
// decimal from 1 to 65535, without leading zeros (a browser reads
// "example.com:99999" as no URL at all and ":00443" as 443).
func plainHost(hostport string) bool {
	h, port, hasPort := strings.Cut(hostport, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return false
		}
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}

// CheckReturnTo reports whether returnTo may be a browser assertion's
// return_to at c: an absolute https URL without userinfo, at most 2048
// bytes, whose host is the Company's organization.domain or a subdomain of
// it, compared case-insensitively without a trailing dot, a DNS name of
// well-formed labels with, if any, a port from 1 to 65535 (spec 5 step 1,
// PA-5-07). Other domains of the same issuer are refused (A-18, see the
// package doc). The error wraps [ErrReturnTo].
func CheckReturnTo(c *poppy.Company, returnTo string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s", ErrReturnTo, why)
	}
	if len(returnTo) > maxReturnTo {
		return bad("longer than 2048 bytes")
	}
	u, err := url.Parse(returnTo)
	switch {
	case err != nil || !u.IsAbs():
		return bad("not an absolute URL")
	case u.Scheme != "https":
		return bad("not https")
	case u.User != nil:
		return bad("has userinfo")
	case !plainHost(u.Host):
		return bad("host is not a DNS name with an optional port in 1-65535")
	}
	if !onDomain(u.Hostname(), companyDomain(c)) {
		return bad("host is not " + companyDomain(c) + " or one of its subdomains")
	}
	return nil
}

// companyDomain returns organization.domain, lower-cased, without a
// trailing dot or a leading "www.".
func companyDomain(c *poppy.Company) string {
	d := c.Domain()
	if doc := c.Document(); doc != nil && doc.Organization != nil && doc.Organization.Domain != "" {
		d = doc.Organization.Domain
	}
	d = strings.TrimSuffix(strings.ToLower(d), ".")
	return strings.TrimPrefix(d, "www.")
}

// onDomain reports whether host is domain or a subdomain of it.
func onDomain(host, domain string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return domain != "" && (host == domain || strings.HasSuffix(host, "."+domain))
}
