package api

// Tools for an LLM tool runtime (issue 11, item 4), provider-neutral.
//
// Names: "{label}_{name}", where label is the first DNS label of the API's
// host (made unique among the Company's APIs by a numeric suffix, in the
// order of poppy.json) and name is the operationId (or method and path) or
// the MCP tool's name, with every character outside [A-Za-z0-9_-] replaced
// by "_". A name over 64 characters is cut and ends with 8 hex digits of its
// SHA-256; a name already taken gets "_2", "_3", … in the order of the
// description. The same poppy.json and descriptions give the same names.
//
// Results are JSON objects for the model. A refusal by the Company is a
// result too ({"error": code, "sign_in_types": …}), so the model can tell
// the User what to do; Execute returns a Go error only when ctx ends. Before
// a description or a result leaves the package, every Session Token value
// the Session holds for the API and every DPoP proof is replaced by
// "[redacted]" (PA-4.8-08): a Company that echoes one gets nothing into the
// model's context.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/operations"
)

// ToolsOptions configures NewToolset. The zero value is valid.
type ToolsOptions struct {
	// MaxSchemaBytes bounds each tool's input schema. Zero means 16 KiB.
	MaxSchemaBytes int
	// MaxResultBytes bounds each result given to the model; a longer body
	// is cut and marked truncated. Zero means 64 KiB.
	MaxResultBytes int
	// OpenAPI and MCP are passed to LoadOpenAPI and ConnectMCP.
	OpenAPI *OpenAPIOptions
	MCP     *MCPOptions
}

// Tool is one API capability offered to a model.
type Tool struct {
	// Name is stable and unique in its Toolset: [A-Za-z0-9_-]{1,64}.
	Name string
	// Description is the Company's text, cleaned; the model reads it.
	Description string
	// InputSchema is a JSON Schema (draft 2020-12) of the arguments, a
	// JSON object, without $ref.
	InputSchema json.RawMessage
	// API is the poppy.json entry the tool belongs to.
	API poppy.API
	// Method and Path are the OpenAPI operation's (Path as a template),
	// empty for an MCP tool; MCPName is the MCP tool's name, empty for an
	// OpenAPI operation. They name the action for standing permissions.
	Method, Path, MCPName string

	ts     *Toolset
	schema *jsonschema.Schema
	run    func(ctx context.Context, args map[string]any) (any, error)
}

// Toolset holds the tools of a Company's APIs in one Session and the MCP
// connections they use. Close it when done.
type Toolset struct {
	sess      *poppy.Session
	tools     []*Tool
	byName    map[string]*Tool
	mcps      []*MCP
	maxResult int
}

// NewToolset loads every API of the Company that List returns and turns
// its OpenAPI operations and MCP tools into Tools. An API that fails to
// load is left out and its error joined into the returned error, with the
// Toolset of the others; the Toolset is nil only when ctx ended.
// Operations of the operations endpoint (confirm, cancel) are never tools:
// a model must not be able to confirm an operation (OPS 5.1).
func NewToolset(ctx context.Context, sess *poppy.Session, opts *ToolsOptions) (*Toolset, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	var o ToolsOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxSchemaBytes <= 0 {
		o.MaxSchemaBytes = 16 << 10
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = 64 << 10
	}
	ts := &Toolset{sess: sess, byName: map[string]*Tool{}, maxResult: o.MaxResultBytes}
	c := sess.Company()
	opsPrefix := operationsEndpoint(c)
	labels := map[string]bool{}
	var errs []error
	for _, e := range List(c) {
		label := uniqueLabel(e.URL, labels)
		switch e.Type {
		case TypeOpenAPI:
			oa, err := LoadOpenAPI(ctx, sess, e, o.OpenAPI)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("api: %s: %w", e.URL, err))
				continue
			}
			errs = append(errs, ts.addOpenAPIAll(ctx, oa, label, o.MaxSchemaBytes, opsPrefix)...)
		case TypeMCP:
			m, err := ConnectMCP(ctx, sess, e, o.MCP)
			if err != nil {
				if ctx.Err() != nil {
					ts.Close()
					return nil, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("api: %s: %w", e.URL, err))
				continue
			}
			ts.mcps = append(ts.mcps, m)
			// One budget for all of the server's tool schemas, as for a
			// description's (see resolveRefs).
			shared := &budget{nodes: maxDescriptionNodes, bytes: maxDescriptionBytes}
			for t, err := range m.Tools(ctx) {
				if err != nil {
					errs = append(errs, fmt.Errorf("api: %s: %w", e.URL, err))
					break
				}
				if err := ts.addMCP(ctx, m, t, label, o.MaxSchemaBytes, shared); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return ts, errors.Join(errs...)
}

// Tools returns the tools, in the order of poppy.json and then of each
// API's description.
func (ts *Toolset) Tools() []*Tool { return slices.Clone(ts.tools) }

// Tool returns the tool called name.
func (ts *Toolset) Tool(name string) (*Tool, bool) {
	t, ok := ts.byName[name]
	return t, ok
}

// Close ends the MCP connections.
func (ts *Toolset) Close() error {
	var errs []error
	for _, m := range ts.mcps {
		errs = append(errs, m.Close())
	}
	ts.mcps = nil
	return errors.Join(errs...)
}

// operationsEndpoint is the operations extension's endpoint, the prefix of
// the URLs no tool may call.
func operationsEndpoint(c *poppy.Company) string {
	e, ok := c.Extension("operations", "1")
	if !ok {
		return ""
	}
	var v struct {
		Endpoint string `json:"endpoint"`
	}
	if json.Unmarshal(e.Raw, &v) != nil {
		return ""
	}
	return strings.TrimSuffix(v.Endpoint, "/")
}

var nameRE = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

func sanitize(s string) string {
	s = strings.Trim(nameRE.ReplaceAllString(s, "_"), "_")
	if s == "" {
		s = "tool"
	}
	return s
}

func uniqueLabel(raw string, used map[string]bool) string {
	label := "api"
	if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
		label = sanitize(strings.SplitN(u.Hostname(), ".", 2)[0])
	}
	l := label
	for i := 2; used[l]; i++ {
		l = fmt.Sprintf("%s%d", label, i)
	}
	used[l] = true
	return l
}

const maxName = 64

// name returns a unique, valid tool name for label and base.
func (ts *Toolset) name(label, base string) string {
	n := fitName(label + "_" + sanitize(base))
	for i := 2; ts.byName[n] != nil; i++ {
		n = fitName(fmt.Sprintf("%s_%s_%d", label, sanitize(base), i))
	}
	return n
}

func fitName(n string) string {
	if len(n) <= maxName {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:maxName-9] + "_" + hex.EncodeToString(sum[:4])
}

// add bounds and compiles t's input schema, drawing on shared, unless
// t.schema is set already, and adds t.
func (ts *Toolset) add(ctx context.Context, t *Tool, maxSchema int, shared *budget) error {
	t.ts = ts
	if t.schema == nil {
		var v any
		if err := json.Unmarshal(t.InputSchema, &v); err != nil {
			return fmt.Errorf("api: tool %s: schema: %w", t.Name, err)
		}
		b, err := boundSchema(v, v, maxSchema, shared, false)
		if err != nil {
			return fmt.Errorf("api: tool %s: %w", t.Name, err)
		}
		t.InputSchema = b
		if t.schema, err = compileSchema(t.Name, b); err != nil {
			return fmt.Errorf("api: tool %s: invalid input schema: %s", t.Name, cleanText(err.Error(), 200))
		}
	}
	// Scrubbed first, then cut: a cut must not leave part of a secret.
	t.Description = cleanText(scrubString(ctx, ts.sess, t.Description), maxText)
	ts.tools = append(ts.tools, t)
	ts.byName[t.Name] = t
	return nil
}

// addOpenAPIAll adds a tool per operation of oa, except those of the
// operations endpoint: only the User's own interface confirms (OPS 5.1).
func (ts *Toolset) addOpenAPIAll(ctx context.Context, oa *OpenAPI, label string, maxSchema int, opsPrefix string) []error {
	var errs []error
	for _, op := range oa.ops {
		if opsPrefix != "" && strings.HasPrefix(oa.server.String()+op.Path, opsPrefix) {
			continue
		}
		if err := ts.addOpenAPI(ctx, oa, op, label, maxSchema); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// addOpenAPI makes a tool of one operation. Its input is an object with a
// property per parameter and "body" for the request body.
func (ts *Toolset) addOpenAPI(ctx context.Context, oa *OpenAPI, op *Endpoint, label string, maxSchema int) error {
	base := op.ID
	if base == "" {
		base = strings.ToLower(op.Method) + "_" + op.Path
	}
	// The input schema's form before inlining: the parameters' and the
	// body's schemas as the description gives them, shared with every
	// operation that has the same ones.
	props := map[string]any{}
	var required []string
	for _, p := range op.Parameters {
		var s any = p.Schema
		if p.Description != "" {
			m := map[string]any{"description": p.Description}
			if json.Unmarshal(p.Schema, &m) != nil {
				m = map[string]any{"description": p.Description}
			}
			m["description"] = p.Description
			s = m
		}
		props[p.Name] = s
		if p.Required {
			required = append(required, p.Name)
		}
	}
	bodyName := "body"
	if _, clash := props[bodyName]; clash {
		bodyName = "request_body"
	}
	if op.Body != nil {
		props[bodyName] = op.Body.Schema
		if op.Body.Required {
			required = append(required, bodyName)
		}
	}
	schema := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		schema["required"] = required
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return err
	}
	desc := op.Summary
	if op.Description != "" {
		desc = strings.TrimSpace(desc + ". " + op.Description)
	}
	if desc == "" {
		desc = op.Method + " " + op.Path
	}
	if op.ProposesOperation {
		desc += " May propose an operation that the User must approve before it takes effect."
	}
	t := &Tool{Name: ts.name(label, base), Description: desc, API: oa.entry, Method: op.Method, Path: op.Path}
	built := oa.ix.toolSchema(b, maxSchema)
	if built.err != nil {
		return fmt.Errorf("api: tool %s: %w", t.Name, built.err)
	}
	t.InputSchema, t.schema = built.b, built.s
	t.run = func(ctx context.Context, args map[string]any) (any, error) {
		a := &Args{Params: map[string]any{}}
		for k, v := range args {
			if k == bodyName && op.Body != nil {
				a.Body = v
				continue
			}
			a.Params[k] = v
		}
		resp, err := oa.call(ctx, op, a)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"status": resp.Status}
		if resp.Operation != nil {
			out["operation"] = resp.Operation
			out["approval"] = proposedNote
			return out, nil
		}
		out["body"] = bodyValue(resp.Body)
		return out, nil
	}
	return ts.add(ctx, t, maxSchema, nil)
}

// proposedNote tells the model what a proposed operation is (OPS 1, 5.1).
const proposedNote = "PROPOSED, NOT DONE. The Company has proposed this operation; nothing has happened yet. " +
	"It takes effect only after the User approves its summary in the agent's own interface and the agent confirms it. " +
	"Tell the User what is proposed and that it awaits their approval; never say it is done."

// addMCP makes a tool of an MCP tool, its schema drawing on shared, the
// budget of the server's tools.
func (ts *Toolset) addMCP(ctx context.Context, m *MCP, mt *mcp.Tool, label string, maxSchema int, shared *budget) error {
	schema := json.RawMessage(`{"type":"object"}`)
	if mt.InputSchema != nil {
		b, err := json.Marshal(mt.InputSchema)
		if err != nil {
			return fmt.Errorf("api: MCP tool %s: schema: %w", cleanText(mt.Name, 64), err)
		}
		schema = b
	}
	desc := mt.Description
	if desc == "" {
		desc = mt.Title
	}
	if desc == "" {
		desc = mt.Name
	}
	name := mt.Name
	t := &Tool{Name: ts.name(label, name), Description: desc, InputSchema: schema, API: m.entry, MCPName: name}
	t.run = func(ctx context.Context, args map[string]any) (any, error) {
		res, err := m.CallTool(ctx, name, args)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		// A text that only repeats structuredContent as JSON (as the
		// go-sdk writes it) would cost the model twice.
		if text := strings.Join(texts, "\n"); text != "" && (res.StructuredContent == nil || !json.Valid([]byte(text))) {
			out["text"] = text
		}
		if res.IsError {
			out["is_error"] = true
		}
		if res.Operation != nil {
			out["operation"] = res.Operation
			out["approval"] = proposedNote
			return out, nil
		}
		if res.StructuredContent != nil {
			out["structured"] = res.StructuredContent
		}
		return out, nil
	}
	return ts.add(ctx, t, maxSchema, shared)
}

func bodyValue(b []byte) any {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return cleanText(string(b), 16<<10)
}

// Execute runs the tool with the model's arguments (a JSON object) and
// returns the result for the model as JSON. Arguments that don't match the
// input schema, and refusals by the Company, are results too
// ({"error": …}); the error is non-nil only when ctx ended.
func (t *Tool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return t.result(ctx, errorResult("invalid_arguments", "the arguments are not JSON", nil))
	}
	if err := t.schema.Validate(inst); err != nil {
		return t.result(ctx, errorResult("invalid_arguments", t.errText(ctx, err), nil))
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return t.result(ctx, errorResult("invalid_arguments", "the arguments must be a JSON object", nil))
	}
	out, err := t.run(ctx, m)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var pend *operations.PendingError
		if errors.As(err, &pend) && pend.Operation != nil {
			// OPS 6: not proposed again; the model sees the open one.
			wire, merr := pend.Operation.MarshalJSON()
			if merr == nil {
				return t.result(ctx, map[string]any{"error": "operation_pending", "operation": json.RawMessage(wire),
					"message": "An operation this same request proposed is still open, so it was not proposed again. " +
						"It takes effect only if the User approves it; nothing else has happened."})
			}
		}
		var pe *poppy.Error
		if errors.As(err, &pe) {
			return t.result(ctx, errorResult(pe.Code, cleanText(scrubString(ctx, t.ts.sess, pe.Description), maxText), pe))
		}
		if errors.Is(err, ErrInvalidArguments) {
			return t.result(ctx, errorResult("invalid_arguments", t.errText(ctx, err), nil))
		}
		return t.result(ctx, errorResult("request_failed", t.errText(ctx, err), nil))
	}
	return t.result(ctx, out)
}

func errorResult(code, msg string, pe *poppy.Error) map[string]any {
	if code == "" {
		code = "error"
	}
	out := map[string]any{"error": code}
	if msg != "" {
		out["message"] = msg
	}
	if pe != nil {
		out["status"] = pe.Status
		if len(pe.Scope) > 0 {
			out["scope"] = pe.Scope
		}
		if len(pe.SignInTypes) > 0 {
			out["sign_in_types"] = pe.SignInTypes
		}
		if pe.Extension != "" {
			out["extension"] = pe.Extension
		}
		switch pe.Code {
		case "sign_in_required", "insufficient_scope":
			out["hint"] = "The User must sign in to this Company in the agent's own interface (sign_in_types); the model can't do it."
		}
	}
	return out
}

// errText is err's text for the model: secrets scrubbed first, then cut
// to 500 bytes, so that the cut never leaves part of one.
func (t *Tool) errText(ctx context.Context, err error) string {
	return cleanText(scrubString(ctx, t.ts.sess, err.Error()), 500)
}

// result marshals v, bounded, with secrets redacted: scrubbed before it is
// cut, so that no cut leaves part of a secret.
func (t *Tool) result(ctx context.Context, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, apiError("encoding result: %w", err)
	}
	s := scrubString(ctx, t.ts.sess, string(b))
	if len(s) > t.ts.maxResult {
		short, _ := json.Marshal(map[string]any{"truncated": true,
			"partial": strings.ToValidUTF8(s[:t.ts.maxResult/2], "")})
		s = string(short)
	}
	return json.RawMessage(s), nil
}

// jwsRE matches a JWS, or the header and payload of one that was cut
// (a JWT's payload is a JSON object: "eyJ…").
var jwsRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.(?:[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+|eyJ[A-Za-z0-9_-]*)`)

// scrubString replaces the Session Tokens the Session holds, and every
// stretch of one left by a cut (see internal/redact), and every DPoP proof
// (a JWS whose header has typ dpop+jwt), whole or cut, in s (PA-4.8-08).
func scrubString(ctx context.Context, sess *poppy.Session, s string) string {
	s = sess.Redact(ctx, s)
	return jwsRE.ReplaceAllStringFunc(s, func(j string) string {
		h, err := base64.RawURLEncoding.DecodeString(j[:strings.IndexByte(j, '.')])
		if err != nil {
			return j
		}
		var hdr struct {
			Typ string `json:"typ"`
		}
		if json.Unmarshal(h, &hdr) == nil && strings.EqualFold(hdr.Typ, "dpop+jwt") {
			return "[redacted]"
		}
		return j
	})
}
