package api

import (
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/companytext"
)

// The API types of spec 6.
const (
	TypeOpenAPI = "openapi"
	TypeMCP     = "mcp"
)

// Errors callers branch on. A Company's refusal is its *poppy.Error.
var (
	// ErrNotListed: the API entry isn't one of the Company's.
	ErrNotListed = errors.New("api: the Company does not list this API")
	// ErrInvalidDescription: the OpenAPI description doesn't load or
	// validate.
	ErrInvalidDescription = errors.New("api: invalid OpenAPI description")
	// ErrIssuerNotListed: the MCP server's protected resource metadata
	// doesn't list the Company's issuer in authorization_servers (spec 6):
	// it is not the Company's to use with its tokens.
	ErrIssuerNotListed = errors.New("api: MCP server's authorization_servers does not list the Company's issuer")
	// ErrInvalidArguments: a call's arguments don't match its input
	// schema, or a path parameter would be read as a "." or ".." segment
	// (in any encoding), which a server or proxy removes with the segment
	// before it. Nothing is sent.
	ErrInvalidArguments = errors.New("api: arguments do not match the input schema")
	// ErrTooManyTools: an MCP server's tools/list goes past
	// MCPOptions.MaxTools or MaxToolPages, or repeats a cursor; the tools
	// within the bound were yielded.
	ErrTooManyTools = errors.New("api: the MCP server lists too many tools")
)

// Errors no caller branches on: each says what is wrong, and the tests
// match them (export_test.go).
var (
	// errWrongType: an OpenAPI entry given to ConnectMCP, or the reverse.
	errWrongType = errors.New("api: the entry is of another API type")
	// errUnknownEndpoint: no endpoint has that operationId, or that
	// method and path.
	errUnknownEndpoint = errors.New("api: unknown endpoint")
	// errInvalidResourceMetadata: the MCP server's protected resource
	// metadata (RFC 9728) is missing, malformed or for another resource.
	errInvalidResourceMetadata = errors.New("api: invalid protected resource metadata")
	// errDotSegment: a path parameter's value would be read as a "." or
	// ".." segment; it is refused, wrapped in ErrInvalidArguments.
	errDotSegment = errors.New("api: a path parameter may not be a dot segment")
	// errSchemaTooLarge: a schema that can't be inlined and bounded, or
	// the description's budget for inlining its schemas is spent (see
	// OpenAPI.ResolveSchema).
	errSchemaTooLarge = errors.New("api: input schema too large")
)

// List returns the Company's APIs that this package can use, in the order
// of poppy.json: those of type "openapi" or "mcp" with an HTTPS url (or a
// loopback http:// one under AgentOptions.UnsafeAllowLoopbackHTTP). Other
// types are skipped, so that later versions can add types (spec 6,
// PA-6-01, A-20).
func List(c *poppy.Company) []poppy.API {
	var out []poppy.API
	for _, e := range c.Document().APIs {
		if e.Type != TypeOpenAPI && e.Type != TypeMCP {
			continue
		}
		if _, err := c.Agent().ParseURL(e.URL); err != nil {
			continue
		}
		out = append(out, e)
	}
	return out
}

// listed reports whether e is one of c's API entries.
func listed(c *poppy.Company, e poppy.API) bool {
	for _, x := range c.Document().APIs {
		if x.Type == e.Type && x.URL == e.URL {
			return true
		}
	}
	return false
}

// maxText bounds a Company's text put in an error or a tool description.
const maxText = 1024

// cleanText returns untrusted text fit for an error string or a model: one
// line, nothing that could drive a terminal or reorder or hide text
// (internal/companytext), at most n bytes.
func cleanText(s string, n int) string { return companytext.Line(s, n) }

// endpointOf returns scheme://host/path of u: what errors may show.
func endpointOf(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

func apiError(format string, args ...any) error {
	return fmt.Errorf("api: "+format, args...)
}

// SignInFor says how to sign in after a call failed with err (spec 6,
// PA-6-06, PA-6-07): for insufficient_scope, the union of the Session's
// scopes and those the Company named (A-21: missing or full set alike);
// for sign_in_required, need (such as Endpoint.Scopes) with the Session's
// scopes. It returns the SignInOptions to pass to a sign-in and the types
// the Company offers that can grant all of it. ok is false for any other
// error.
func SignInFor(sess *poppy.Session, err error, need ...string) (opts *poppy.SignInOptions, types []string, ok bool) {
	var pe *poppy.Error
	if !errors.As(err, &pe) {
		return nil, nil, false
	}
	scopes := sess.Scopes()
	add := func(list []string) {
		for _, s := range list {
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	switch pe.Code {
	case "insufficient_scope":
		add(pe.Scope)
	case "sign_in_required":
		add(need)
	default:
		return nil, nil, false
	}
	return &poppy.SignInOptions{Scopes: scopes}, sess.Company().EligibleSignInTypes(scopes), true
}
