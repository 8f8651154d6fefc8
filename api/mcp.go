package api

// MCP APIs (spec 4.3, 6).
//
// The Bearer transport sits under the go-sdk's Streamable HTTP client. For
// each request it asks the Session for its Bearer token for the server's url
// (Session.Token with Bearer and Resource: requested without a proof, kept
// beside the DPoP token, one renewal for all concurrent callers), refuses
// any URL but the server's origin, and sends the request. It answers the
// server's refusals itself, so the go-sdk above sees only the final answer:
//
//   - 401 (invalid_token, an expired or revoked token): renew the token and
//     send once more;
//   - 403 sign_in_required: use a stored Account Token, if any, and send
//     once more;
//   - 429: wait Retry-After (bounded), at most three times.
//
// The final refusal is parsed into a *poppy.Error and left in a slot of the
// request's context, where CallTool and the other calls find it to return
// it, wrapped, instead of the go-sdk's bare status text.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/wire"
	"github.com/poppyproto/poppy/operations"
)

// MCPOptions configures ConnectMCP. The zero value is valid.
type MCPOptions struct {
	// ProtocolVersion is the MCP version asked for in initialize. Empty
	// means "2025-11-25"; spec 6 needs 2025-06-18 or later.
	ProtocolVersion string
	// Client is the go-sdk client to connect with. Nil means one named
	// after the agent's client_id.
	Client *mcp.Client
	// Logger receives debug records. Nil discards. No record holds a token.
	Logger *slog.Logger
	// Operations, if set, makes CallTool go through its Propose: while
	// an operation that a call of the same tool with the same arguments
	// proposed is still open, nothing is sent and CallTool returns that
	// operation in a *operations.PendingError (OPS 6, PA-OPS6-04, A-38).
	// It must be a Client of the same Session. Nil means the Session's
	// Client, if New made one (operations.SessionClient).
	Operations *operations.Client
	// MaxTools and MaxToolPages bound what Tools reads of tools/list: at
	// most MaxTools tools in at most MaxToolPages pages. Zero means 1,000
	// tools and 100 pages. A server that lists more, or repeats a cursor,
	// gets ErrTooManyTools after the tools within the bound.
	MaxTools, MaxToolPages int
	// MaxResponseBytes bounds a JSON answer of the server (one JSON-RPC
	// response); past it the read fails, with poppy.ErrResponseTooLarge,
	// and the go-sdk ends the session. Zero means 4 MiB. Events of a
	// stream are bounded by the go-sdk.
	MaxResponseBytes int64
}

const (
	defaultProtocolVersion = "2025-11-25"
	defaultMaxTools        = 1000
	defaultMaxToolPages    = 100
)

// MCP is a connection to one of the Company's MCP servers in a Session. It
// is safe for concurrent use. Close ends it.
type MCP struct {
	sess  *poppy.Session
	entry poppy.API
	cs    *mcp.ClientSession
	tr    *bearerTransport
	opsc  *operations.Client // MCPOptions.Operations

	maxTools, maxPages int

	schemaMu sync.Mutex
	budget   budget // left of the connection's budget for resolving tool schemas
}

// ConnectMCP connects to entry, one of the Company's APIs of type "mcp",
// in sess: it checks the server's protected resource metadata (RFC 9728),
// then initializes an MCP session over Streamable HTTP with a Bearer
// Session Token for the server's url. opts may be nil.
func ConnectMCP(ctx context.Context, sess *poppy.Session, entry poppy.API, opts *MCPOptions) (*MCP, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	if entry.Type != TypeMCP {
		return nil, errWrongType
	}
	c := sess.Company()
	if !listed(c, entry) {
		return nil, ErrNotListed
	}
	var o MCPOptions
	if opts != nil {
		o = *opts
	}
	if o.ProtocolVersion == "" {
		o.ProtocolVersion = defaultProtocolVersion
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	u, err := c.Agent().ParseURL(entry.URL)
	if err != nil {
		return nil, err
	}
	// Spec 6: before the first use, the server's metadata must name the
	// Company's issuer.
	if err := CheckResourceMetadata(ctx, c, entry.URL); err != nil {
		return nil, err
	}
	tr := newBearerTransport(sess, u, o.Logger)
	tr.maxJSON = o.MaxResponseBytes
	if tr.maxJSON <= 0 {
		tr.maxJSON = defaultMaxBytes
	}
	hc := c.Agent().HTTPClient()
	hc.Transport = tr
	// A redirect would carry the Bearer token, or a JSON-RPC body, to
	// another URL: none is followed.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client := o.Client
	if client == nil {
		client = mcp.NewClient(&mcp.Implementation{Name: c.Agent().Identity().ClientID(), Version: "poppy"}, nil)
	}
	slot := &errSlot{}
	cctx := withSlot(ctx, slot)
	cs, err := client.Connect(cctx, &mcp.StreamableClientTransport{
		Endpoint:   entry.URL,
		HTTPClient: hc,
	}, &mcp.ClientSessionOptions{ProtocolVersion: o.ProtocolVersion})
	if err != nil {
		return nil, slot.wrap("connecting to "+endpointOf(u), err)
	}
	if o.MaxTools <= 0 {
		o.MaxTools = defaultMaxTools
	}
	if o.MaxToolPages <= 0 {
		o.MaxToolPages = defaultMaxToolPages
	}
	return &MCP{sess: sess, entry: entry, cs: cs, tr: tr, opsc: o.Operations, maxTools: o.MaxTools, maxPages: o.MaxToolPages,
		budget: budget{nodes: maxDescriptionNodes, bytes: maxDescriptionBytes}}, nil
}

// InputSchema returns t's input schema (t as Tools yields it) as JSON
// Schema fit for a model: every local $ref inlined, and fitting in
// maxBytes (zero means 16 KiB) as OpenAPI.InputSchema's does. A tool
// without one gets {"type":"object"}. The schemas of one connection draw
// on one budget, as a description's do: past it the schema is refused
// with an error saying so.
func (m *MCP) InputSchema(t *mcp.Tool, maxBytes int) (json.RawMessage, error) {
	if t == nil || t.InputSchema == nil {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	if maxBytes <= 0 {
		maxBytes = defaultMaxInputSchema
	}
	b, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, apiError("MCP tool %s: input schema: %w", cleanText(t.Name, 64), err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, apiError("MCP tool %s: input schema: %w", cleanText(t.Name, 64), err)
	}
	m.schemaMu.Lock()
	out, err := boundSchema(v, v, maxBytes, &m.budget, false)
	m.schemaMu.Unlock()
	if err != nil {
		return nil, apiError("MCP tool %s: input schema: %w", cleanText(t.Name, 64), err)
	}
	return out, nil
}

// Entry returns the poppy.json entry.
func (m *MCP) Entry() poppy.API { return m.entry }

// ClientSession returns the go-sdk session, for MCP features this type
// doesn't wrap (resources, prompts). Its requests go through the Bearer
// transport too.
func (m *MCP) ClientSession() *mcp.ClientSession { return m.cs }

// ProtocolVersion returns the MCP version the server agreed to.
func (m *MCP) ProtocolVersion() string {
	if r := m.cs.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

// Close ends the MCP session.
func (m *MCP) Close() error { return m.cs.Close() }

// Tools lists the server's tools, page by page (tools/list with cursors).
// Breaking out of the loop stops listing. A server's list is bounded
// (MCPOptions.MaxTools, MaxToolPages): past the bound, or at a cursor the
// server gave before (a list without end), the tools read so far have been
// yielded and the last value is an error wrapping ErrTooManyTools.
func (m *MCP) Tools(ctx context.Context) iter.Seq2[*mcp.Tool, error] {
	return func(yield func(*mcp.Tool, error) bool) {
		slot := &errSlot{}
		sctx := withSlot(ctx, slot)
		seen := map[string]bool{}
		cursor, n := "", 0
		for page := 1; ; page++ {
			if page > m.maxPages {
				yield(nil, fmt.Errorf("%w: over %d pages", ErrTooManyTools, m.maxPages))
				return
			}
			res, err := m.cs.ListTools(sctx, &mcp.ListToolsParams{Cursor: cursor})
			if err != nil {
				yield(nil, slot.wrap("tools/list", err))
				return
			}
			for _, t := range res.Tools {
				if n++; n > m.maxTools {
					yield(nil, fmt.Errorf("%w: over %d tools", ErrTooManyTools, m.maxTools))
					return
				}
				if !yield(t, nil) {
					return
				}
			}
			if res.NextCursor == "" {
				return
			}
			if seen[res.NextCursor] {
				yield(nil, fmt.Errorf("%w: the cursor of page %d was given before", ErrTooManyTools, page))
				return
			}
			// The cursors kept are bounded by the pages, their bytes by
			// the response bound.
			seen[res.NextCursor] = true
			cursor = res.NextCursor
		}
	}
}

// ToolResult is the result of a tool call.
type ToolResult struct {
	*mcp.CallToolResult
	// Operation is the operation the tool proposes, from "operation" in
	// structuredContent (OPS 4.2), never from the text content: with
	// MCPOptions.Operations, that Client's view of it. It is not done until
	// the User approves it and it is confirmed at the operations endpoint.
	// Nil otherwise. A result whose operation breaks the extension's rules
	// is an error matching operations.ErrProtocol.
	Operation *operations.Operation
}

// operations returns the Client the MCP connection hands operations to:
// MCPOptions.Operations, else the Session's (operations.SessionClient).
func (m *MCP) operations() *operations.Client {
	if m.opsc != nil {
		return m.opsc
	}
	return operations.SessionClient(m.sess)
}

// CallTool calls the tool name with args (a JSON object: a map, a struct or
// a json.RawMessage). A refusal by the server (403 insufficient_scope or
// sign_in_required after the stored Account Token, if any, was tried) is an
// error wrapping the *poppy.Error; a tool's own failure is a result with
// IsError set. With MCPOptions.Operations (or the Session's Client), a
// call whose operation is still open is not sent (see there).
func (m *MCP) CallTool(ctx context.Context, name string, args any) (*ToolResult, error) {
	opsc := m.operations()
	if opsc == nil {
		return m.callTool(ctx, name, args)
	}
	key, err := operations.ToolCallKey(m.entry.URL, name, args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArguments, err)
	}
	var out *ToolResult
	op, _, err := opsc.Propose(ctx, nil, operations.ToolAction(name), &operations.ProposeOptions{CallKey: key,
		Call: func(ctx context.Context) (*operations.Operation, error) {
			var err error
			if out, err = m.callTool(ctx, name, args); err != nil || out.Operation == nil {
				return nil, err
			}
			return out.Operation, nil
		}})
	if err != nil {
		return nil, err
	}
	if op != nil {
		out.Operation = op // the Client's view
	}
	return out, nil
}

func (m *MCP) callTool(ctx context.Context, name string, args any) (*ToolResult, error) {
	slot := &errSlot{}
	res, err := m.cs.CallTool(withSlot(ctx, slot), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, slot.wrap("tools/call "+cleanText(name, 64), err)
	}
	out := &ToolResult{CallToolResult: res}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			if raw := operationOf(b); raw != nil {
				if out.Operation, err = operations.Parse(raw); err != nil {
					return nil, fmt.Errorf("api: MCP tools/call %s: the result's operation: %w", cleanText(name, 64), err)
				}
			}
		}
	}
	return out, nil
}

// Renewals returns how many times the Bearer transport renewed a token the
// server refused.
func (m *MCP) Renewals() int { return int(m.tr.renewals.Load()) }

// errSlot holds the Company's refusal of a request made for one call.
type errSlot struct {
	mu  sync.Mutex
	err *poppy.Error
}

type slotKey struct{}

func withSlot(ctx context.Context, s *errSlot) context.Context {
	return context.WithValue(ctx, slotKey{}, s)
}

func (s *errSlot) set(e *poppy.Error) {
	s.mu.Lock()
	s.err = e
	s.mu.Unlock()
}

// wrap returns err with the refusal the transport saw, if any.
func (s *errSlot) wrap(what string, err error) error {
	s.mu.Lock()
	pe := s.err
	s.mu.Unlock()
	if pe != nil {
		return fmt.Errorf("api: MCP %s: %w", what, pe)
	}
	return fmt.Errorf("api: MCP %s: %w", what, err)
}

// bearerTransport attaches the Session's Bearer token for one MCP server.
type bearerTransport struct {
	sess     *poppy.Session
	resource string // the MCP url
	origin   string // scheme://host of the url
	base     http.RoundTripper
	log      *slog.Logger
	renewals atomic.Int64
	maxJSON  int64 // bound of a JSON answer; 0: none
}

func newBearerTransport(sess *poppy.Session, u *url.URL, log *slog.Logger) *bearerTransport {
	base := sess.Company().Agent().HTTPClient().Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &bearerTransport{sess: sess, resource: u.String(), origin: strings.ToLower(u.Scheme + "://" + u.Host),
		base: base, log: log}
}

// errMCPTooLarge is the read error of an MCP answer over its bound.
var errMCPTooLarge = fmt.Errorf("%w: an MCP answer over the bound", poppy.ErrResponseTooLarge)

func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody := func() {
		if req.Body != nil {
			req.Body.Close()
		}
	}
	// PA-4.3-19: the Bearer token goes to this server only.
	if strings.ToLower(req.URL.Scheme+"://"+req.URL.Host) != t.origin {
		closeBody()
		return nil, fmt.Errorf("%w: %s is not the MCP server's origin", poppy.ErrForeignHost, req.URL.Hostname())
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		closeBody()
		return nil, apiError("MCP request body can't be replayed")
	}
	ctx := req.Context()
	opts := &poppy.TokenOptions{Bearer: true, Resource: t.resource}
	renewed, signInTried := false, false
	agent := t.sess.Company().Agent()
	var refused *poppy.Token
	for attempt := 0; ; attempt++ {
		var tok *poppy.Token
		var err error
		if refused != nil {
			// One renewal for every request this token was refused for.
			tok, err = t.sess.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: t.resource, Refused: refused})
			refused = nil
		} else {
			tok, err = t.sess.Token(ctx, opts)
		}
		if err != nil {
			closeBody()
			return nil, err
		}
		r := req.Clone(ctx)
		r.Header.Del("DPoP")
		r.Header.Set("Authorization", "Bearer "+tok.Value())
		if req.GetBody != nil {
			if r.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		resp, err := t.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 400 {
			if ct := resp.Header.Get("Content-Type"); t.maxJSON > 0 && strings.HasPrefix(strings.ToLower(ct), "application/json") {
				resp.Body = bounded.Body(resp.Body, t.maxJSON, errMCPTooLarge)
			}
			return resp, nil
		}
		perr := t.refusal(resp)
		again := false
		var wait time.Duration
		switch {
		case resp.StatusCode == http.StatusUnauthorized && !renewed:
			// Spec 6: an expired or revoked token is renewed, once.
			renewed, again = true, true
			refused = tok
			t.renewals.Add(1)
		case perr.Code == "sign_in_required" && !signInTried:
			signInTried = true
			_, ok, err := t.sess.UseAccountToken(ctx, nil)
			if err != nil {
				t.log.DebugContext(ctx, "api: using a stored Account Token failed", "error", err)
			}
			again = ok
		case resp.StatusCode == http.StatusTooManyRequests:
			// The Agent's retry policy, the Session transport's
			// (PA-4.3-27..29).
			wait, again = agent.RetryWait(perr.RetryAfter, attempt)
		}
		if !again {
			if s, _ := ctx.Value(slotKey{}).(*errSlot); s != nil {
				s.set(perr)
			}
			return t.asRPCError(req, resp, perr), nil
		}
		wire.Drain(resp)
		if wait > 0 {
			if err := agent.Clock().Sleep(ctx, wait); err != nil {
				return nil, err
			}
		}
	}
}

// asRPCError turns a refusal (400, 401, 403) of a JSON-RPC request into a
// JSON-RPC error response with the request's id, keeping the status. The
// go-sdk then fails that one call and keeps the MCP session, instead of
// closing it on a body it can't read: the User can sign in and the caller
// retry. The *poppy.Error itself reaches the caller through the slot.
func (t *bearerTransport) asRPCError(req *http.Request, resp *http.Response, perr *poppy.Error) *http.Response {
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden:
	default:
		return resp
	}
	if req.Method != http.MethodPost || req.GetBody == nil {
		return resp
	}
	rb, err := req.GetBody()
	if err != nil {
		return resp
	}
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	err = json.NewDecoder(io.LimitReader(rb, 1<<20)).Decode(&msg)
	rb.Close()
	if err != nil || len(msg.ID) == 0 || string(msg.ID) == "null" {
		return resp
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
		"error": map[string]any{"code": -32001, "message": perr.Error()}})
	wire.Drain(resp)
	out := *resp
	out.Header = resp.Header.Clone()
	out.Header.Set("Content-Type", "application/json")
	out.Header.Del("Content-Length")
	out.ContentLength = int64(len(body))
	out.Body = io.NopCloser(bytes.NewReader(body))
	return &out
}

// refusal reads resp's error, with the sign-in types that would help.
func (t *bearerTransport) refusal(resp *http.Response) *poppy.Error {
	var pe *poppy.Error
	if !errors.As(poppy.ResponseError(resp), &pe) {
		pe = &poppy.Error{Status: resp.StatusCode}
	}
	c := t.sess.Company()
	switch pe.Code {
	case "sign_in_required":
		pe.SignInTypes = c.SignInTypes()
	case "insufficient_scope":
		pe.SignInTypes = c.EligibleSignInTypes(pe.Scope)
	}
	return pe
}

// ResourceMetadata is an MCP server's OAuth protected resource metadata
// (RFC 9728), with the fields this package reads.
type ResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported,omitempty"`
}

// CheckResourceMetadata fetches the protected resource metadata (RFC 9728)
// of the MCP server at mcpURL from its well-known location, through the
// Agent's document cache (HTTPS only, redirects only to HTTPS, size cap,
// HTTP caching), and checks that its resource is mcpURL and that
// authorization_servers lists the Company's issuer (spec 6).
func CheckResourceMetadata(ctx context.Context, c *poppy.Company, mcpURL string) error {
	u, err := c.Agent().ParseURL(mcpURL)
	if err != nil {
		return err
	}
	// RFC 9728 3.1: the well-known segment goes before the resource's path.
	meta := u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.EscapedPath(), "/")
	body, err := c.Agent().FetchDocument(ctx, meta, &poppy.DocumentOptions{Name: "protected resource metadata", MaxBytes: 64 << 10})
	if err != nil {
		return fmt.Errorf("%w: %w", errInvalidResourceMetadata, err)
	}
	var m ResourceMetadata
	if err := json.Unmarshal(body, &m); err != nil {
		return fmt.Errorf("%w: not a JSON object", errInvalidResourceMetadata)
	}
	// RFC 9728 3.3: resource must be the URL the metadata was derived from.
	if m.Resource != mcpURL {
		return fmt.Errorf("%w: resource %q is not %q", errInvalidResourceMetadata, cleanText(m.Resource, 200), mcpURL)
	}
	for _, s := range m.AuthorizationServers {
		if s == c.Issuer() {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrIssuerNotListed, endpointOf(u))
}
