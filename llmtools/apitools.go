package llmtools

// The tools made of a Company's APIs (one
// tool type, this package's, where package api had one of its own).
//
// Names: "{company}__{label}_{name}", where label is the first DNS label of
// the API's host (made unique among the Company's APIs by a numeric
// suffix, in the order of poppy.json) and name is the operationId (or
// method and path) or the MCP tool's name, with every character outside
// [A-Za-z0-9_-] replaced by "_". A name over 64 characters is cut and ends
// with 8 hex digits of its SHA-256; a name already taken gets "_2", "_3",
// … in the order of the description. The same poppy.json and descriptions
// give the same names.
//
// A refusal by the Company is a result too ({"error": code, …}), so the
// model can tell the User what to do; Execute returns a Go error only when
// ctx ends. Before a description or a result reaches the model every
// secret the Toolkit's Sessions hold and every JWS-shaped string is
// replaced (PA-4.8-08; see Toolkit.scrub).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/operations"
)

// APIOptions configures the tools made of a Company's APIs. The zero value
// is valid.
type APIOptions struct {
	// MaxSchemaBytes bounds each tool's input schema (see
	// api.OpenAPI.InputSchema and api.MCP.InputSchema). Zero means 16 KiB.
	MaxSchemaBytes int
	// MaxResultBytes bounds each result of a Company tool given to the
	// model; a longer one is cut and marked truncated. Zero means 64 KiB.
	MaxResultBytes int
	// OpenAPI and MCP are passed to api.LoadOpenAPI and api.ConnectMCP.
	// Their Operations is replaced by the Company's operations Client (made
	// with Options.Operations), so that a call proposes an operation at
	// most once while it is open and the Client that poppy_request_approval
	// uses holds every operation a tool proposed.
	OpenAPI *api.OpenAPIOptions
	MCP     *api.MCPOptions
}

const defaultMaxResult = 64 << 10

// proposedNoExtension tells the model what a proposed operation is when
// the Company offers no operations extension to the Toolkit (OPS 1, 5.1).
const proposedNoExtension = "PROPOSED, NOT DONE. The Company has proposed this operation; nothing has happened yet. " +
	"It takes effect only after the User approves its summary in the agent's own interface and the agent confirms it. " +
	"Tell the User what is proposed and that it awaits their approval; never say it is done."

// apiTools loads every API of c's Company that api.List returns and makes
// a Tool of each OpenAPI endpoint and MCP tool, keeping the MCP
// connections in c. An API that fails to load is left out and its error
// joined into the returned error, with the tools of the others; the
// error alone is returned when ctx ended. The endpoints of the operations
// extension (confirm, cancel) are never tools: a model must not be able
// to confirm an operation (OPS 5.1).
func (k *Toolkit) apiTools(ctx context.Context, c *company) ([]*Tool, error) {
	var o APIOptions
	if k.opts.APIs != nil {
		o = *k.opts.APIs
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = defaultMaxResult
	}
	var oo api.OpenAPIOptions
	if o.OpenAPI != nil {
		oo = *o.OpenAPI
	}
	oo.Operations = c.ops
	var mo api.MCPOptions
	if o.MCP != nil {
		mo = *o.MCP
	}
	mo.Operations = c.ops
	co := c.sess.Company()
	opsPrefix := operationsEndpoint(co)
	b := &apiToolBuilder{k: k, c: c, maxSchema: o.MaxSchemaBytes, maxResult: o.MaxResultBytes, names: map[string]bool{}}
	labels := map[string]bool{}
	var errs []error
	for _, e := range api.List(co) {
		label := uniqueLabel(e.URL, labels)
		switch e.Type {
		case api.TypeOpenAPI:
			oa, err := api.LoadOpenAPI(ctx, c.sess, e, &oo)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("llmtools: %s: %w", e.URL, err))
				continue
			}
			for _, ep := range oa.Endpoints() {
				if opsPrefix != "" && strings.HasPrefix(oa.ServerURL()+ep.Path, opsPrefix) {
					continue
				}
				if err := b.endpoint(ctx, oa, ep, label); err != nil {
					errs = append(errs, err)
				}
			}
		case api.TypeMCP:
			m, err := api.ConnectMCP(ctx, c.sess, e, &mo)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("llmtools: %s: %w", e.URL, err))
				continue
			}
			c.mcps = append(c.mcps, m)
			for t, err := range m.Tools(ctx) {
				if err != nil {
					errs = append(errs, fmt.Errorf("llmtools: %s: %w", e.URL, err))
					break
				}
				if err := b.mcpTool(ctx, m, t, label); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return b.tools, errors.Join(errs...)
}

// apiToolBuilder makes the tools of one Company's APIs.
type apiToolBuilder struct {
	k                    *Toolkit
	c                    *company
	maxSchema, maxResult int
	names                map[string]bool // the names within the Company, before its key
	tools                []*Tool
}

// name returns a name for label and base unique among the Company's tools.
func (b *apiToolBuilder) name(label, base string) string {
	n := fitName(label + "_" + sanitize(base))
	for i := 2; b.names[n]; i++ {
		n = fitName(fmt.Sprintf("%s_%s_%d", label, sanitize(base), i))
	}
	b.names[n] = true
	return n
}

func (b *apiToolBuilder) add(ctx context.Context, t *Tool, name string, entry poppy.API) {
	t.Name = fitName(b.c.key + "__" + name)
	t.Domain = b.c.domain
	t.API = entry
	t.maxResult = b.maxResult
	// Scrubbed first, then cut (in Toolkit.add): a cut must not leave part
	// of a secret.
	t.Description = "[" + b.c.domain + "] " + b.k.scrubWith(ctx, b.c.sess, t.Description)
	b.tools = append(b.tools, t)
}

// endpoint makes a tool of one OpenAPI endpoint: its input is the object
// of api.OpenAPI.InputSchema.
func (b *apiToolBuilder) endpoint(ctx context.Context, oa *api.OpenAPI, ep *api.Endpoint, label string) error {
	base := ep.ID
	if base == "" {
		base = strings.ToLower(ep.Method) + "_" + ep.Path
	}
	name := b.name(label, base)
	schema, err := oa.InputSchema(ep, b.maxSchema)
	if err != nil {
		return fmt.Errorf("llmtools: tool %s: %w", name, err)
	}
	desc := ep.Summary
	if ep.Description != "" {
		desc = strings.TrimSpace(desc + ". " + ep.Description)
	}
	if desc == "" {
		desc = ep.Method + " " + ep.Path
	}
	if ep.ProposesOperation {
		desc += " May propose an operation that the User must approve before it takes effect."
	}
	k, c := b.k, b.c
	t := &Tool{Description: desc, InputSchema: schema, Action: operations.OpenAPIAction(ep.Method, ep.Path)}
	t.run = func(ctx context.Context, args json.RawMessage) (any, error) {
		obj, err := argsObject(args)
		if err != nil {
			return nil, err
		}
		resp, err := oa.CallEndpoint(ctx, ep, ep.ArgsOf(obj))
		if err != nil {
			return nil, err
		}
		out := map[string]any{"status": resp.Status}
		if resp.Operation != nil {
			k.proposedInto(ctx, c, out, resp.Operation)
			return out, nil
		}
		out["body"] = bodyValue(resp.Body)
		return out, nil
	}
	b.add(ctx, t, name, oa.Entry())
	return nil
}

// mcpTool makes a tool of an MCP tool.
func (b *apiToolBuilder) mcpTool(ctx context.Context, m *api.MCP, mt *mcp.Tool, label string) error {
	name := b.name(label, mt.Name)
	schema, err := m.InputSchema(mt, b.maxSchema)
	if err != nil {
		return fmt.Errorf("llmtools: tool %s: %w", name, err)
	}
	desc := mt.Description
	if desc == "" {
		desc = mt.Title
	}
	if desc == "" {
		desc = mt.Name
	}
	k, c, tool := b.k, b.c, mt.Name
	t := &Tool{Description: desc, InputSchema: schema, Action: operations.ToolAction(tool)}
	t.run = func(ctx context.Context, args json.RawMessage) (any, error) {
		obj, err := argsObject(args)
		if err != nil {
			return nil, err
		}
		res, err := m.CallTool(ctx, tool, obj)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		var texts []string
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
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
			k.proposedInto(ctx, c, out, res.Operation)
			return out, nil
		}
		if res.StructuredContent != nil {
			out["structured"] = res.StructuredContent
		}
		return out, nil
	}
	b.add(ctx, t, name, m.Entry())
	return nil
}

// errArgsNotObject: the model's arguments are JSON but not an object.
var errArgsNotObject = fmt.Errorf("%w: the arguments must be a JSON object", api.ErrInvalidArguments)

// argsObject decodes the model's arguments, numbers kept as written.
func argsObject(args json.RawMessage) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, errArgsNotObject
	}
	return m, nil
}

// proposedInto puts the operation a Company tool's call proposed into out:
// with the Company's operations Client, its view (the call went through
// that Client, which has it already), recorded for poppy_list_operations
// and marked proposed; without one, the operation as the Company sent it,
// marked proposed too.
func (k *Toolkit) proposedInto(ctx context.Context, c *company, out map[string]any, op *operations.Operation) {
	out["domain"] = c.domain
	if c.ops == nil {
		out["operation"], out["approval"] = opView(op), proposedNoExtension
		return
	}
	view, approval := k.proposed(ctx, c, op)
	out["operation"] = view
	if approval != nil {
		out["approval"] = approval
	}
}

func bodyValue(b []byte) any {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return plain(string(b), 16<<10)
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

// close ends c's MCP connections.
func (c *company) close() error {
	var errs []error
	for _, m := range c.mcps {
		errs = append(errs, m.Close())
	}
	c.mcps = nil
	return errors.Join(errs...)
}
