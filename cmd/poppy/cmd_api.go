package main

// poppy apis, api, mcp tools, mcp call: the Company's APIs (spec 6) in the
// Session, through package api. A 202 that proposes an operation (OPS 4.1,
// 4.2) is printed as proposed, never as done, with the "poppy ops confirm"
// to run; the operation is remembered (cmd_ops.go) so that a later process
// finds it by ID. An answer's body is printed as the Company sent it, byte
// for byte, when stdout is not a terminal; on a terminal JSON is indented
// and control characters are escaped, newlines kept.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/operations"
)

// maxDataBytes bounds --data @file.
const maxDataBytes = 4 << 20

type apiEntryJSON struct {
	Type        string `json:"type"`
	URL         string `json:"url"`
	Description string `json:"description"`
	Resource    string `json:"resource,omitempty"`
}

type apisOptions struct {
	app    *app
	Domain string
}

func newCmdAPIs(a *app, runF func(context.Context, *apisOptions) error) *cobra.Command {
	opts := &apisOptions{app: a}
	return &cobra.Command{
		Use:   "apis DOMAIN",
		Short: "List the Company's APIs (OpenAPI and MCP)",
		Long: `apis lists the APIs the Company offers to Personal Agents: OpenAPI
descriptions (call them with "poppy api") and MCP servers (see "poppy mcp").`,
		Example: `  poppy apis example.com
  poppy --json apis example.com`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runAPIs(cmd.Context(), opts)
		},
	}
}

func runAPIs(ctx context.Context, opts *apisOptions) error {
	a := opts.app
	c, err := a.company(ctx, opts.Domain)
	if err != nil {
		return err
	}
	out := []apiEntryJSON{}
	for _, e := range api.List(c) {
		out = append(out, apiEntryJSON{Type: e.Type, URL: e.URL, Description: e.Description, Resource: e.Resource})
	}
	a.out.emit(map[string]any{"domain": c.Domain(), "apis": out})
	a.out.printf("%s at %s:\n", a.out.bold("APIs"), esc(c.Name()))
	if len(out) == 0 {
		a.out.printf("  (none)\n")
	}
	for _, e := range out {
		a.out.printf("  %-8s %s\n", e.Type, esc(e.URL))
		if e.Description != "" {
			a.out.printf("           %s\n", esc(e.Description))
		}
	}
	return nil
}

// apiError turns a refusal that a sign-in can settle into one that says
// which sign-in to run.
func (a *app) apiError(err error, c *poppy.Company, domain string, need []string) error {
	if errors.Is(err, poppy.ErrSignInRequired) || errors.Is(err, poppy.ErrInsufficientScope) {
		return a.signInHint(err, c, domain, need)
	}
	return err
}

// readData reads --data: JSON, or @file with JSON in it.
func readData(data string) (json.RawMessage, error) {
	if data == "" {
		return nil, nil
	}
	b := []byte(data)
	if strings.HasPrefix(data, "@") {
		f, err := os.Open(data[1:])
		if err != nil {
			return nil, usageError{err: fmt.Errorf("poppy: --data: %w", err)}
		}
		defer f.Close()
		b = make([]byte, maxDataBytes+1)
		n, _ := f.Read(b)
		for n < len(b) {
			m, err := f.Read(b[n:])
			n += m
			if err != nil {
				break
			}
		}
		if n > maxDataBytes {
			return nil, usageError{err: errors.New("poppy: --data file is larger than 4 MiB")}
		}
		b = b[:n]
	}
	if !json.Valid(b) {
		return nil, usageError{err: errors.New("poppy: --data is not valid JSON")}
	}
	return json.RawMessage(b), nil
}

// bodyJSON is a response body for --json: JSON as it is, else a string.
func bodyJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b)
}

type apiOptions struct {
	app    *app
	Domain string
	Method string
	Path   string
	Data   string
	API    string // --api: the OpenAPI description URL
}

func newCmdAPI(a *app, runF func(context.Context, *apiOptions) error) *cobra.Command {
	opts := &apiOptions{app: a}
	cmd := &cobra.Command{
		Use:   "api DOMAIN METHOD PATH",
		Short: "Call an operation of the Company's OpenAPI API",
		Long: `api calls METHOD PATH (a path of the description, such as /orders or
/orders/ord_1/exchanges) in your Session, with a DPoP-bound Session Token.
--data sends a JSON body, given inline or as @file.

The answer's body is printed as the Company sent it: byte for byte when
stdout is not a terminal (a pipe or a file), indented when it is JSON and
stdout is a terminal. --json prints the envelope instead: status, content
type and body.

An answer that proposes an operation (202) is not done: it waits for your
approval, which "poppy ops confirm DOMAIN ID" asks for.`,
		Example: `  poppy api example.com GET /orders
  poppy api example.com GET /orders > orders.json
  poppy api example.com POST /orders/ord_1/exchanges --data @exchange.json
  poppy --json api example.com GET /orders | jq .status`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain, opts.Method, opts.Path = args[0], strings.ToUpper(args[1]), args[2]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runAPI(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Data, "data", "", "the JSON body, or @FILE to read it from a file")
	cmd.Flags().StringVar(&opts.API, "api", "", "the OpenAPI description URL to use, when the Company lists several")
	return cmd
}

func runAPI(ctx context.Context, opts *apiOptions) error {
	a := opts.app
	domain, method, path := opts.Domain, opts.Method, opts.Path
	body, err := readData(opts.Data)
	if err != nil {
		return err
	}
	c, s, err := a.session(ctx, domain)
	if err != nil {
		return err
	}
	// With the operations extension, calls go through the operations
	// client: while an operation this same call proposed is open, nothing
	// is sent (OPS 6, PA-OPS6-04), even from an earlier run of poppy, since
	// proposals are journalled.
	var oo *api.OpenAPIOptions
	if oc, err := operations.New(s, nil); err == nil {
		oo = &api.OpenAPIOptions{Operations: oc}
	}
	var oa *api.OpenAPI
	var found *api.Endpoint
	for _, e := range api.List(c) {
		if e.Type != api.TypeOpenAPI || (opts.API != "" && e.URL != opts.API) {
			continue
		}
		o, err := api.LoadOpenAPI(ctx, s, e, oo)
		if err != nil {
			return err
		}
		if ep, ok := o.Find(method, path); ok {
			oa, found = o, ep
			break
		}
	}
	if oa == nil {
		return usageError{err: fmt.Errorf("poppy: no OpenAPI API of %s has %s %s", domain, method, path),
			hint: "see: " + a.cmdline("apis", shellQuote(domain))}
	}
	var cargs *api.Args
	if body != nil {
		cargs = &api.Args{Body: body}
	}
	resp, err := oa.CallPath(ctx, method, path, cargs)
	if a.printPending(ctx, c, err) {
		return nil
	}
	if err != nil {
		return a.apiError(err, c, domain, found.Scopes)
	}
	j := map[string]any{"status": resp.Status, "content_type": resp.Header.Get("Content-Type"), "body": bodyJSON(resp.Body)}
	var op *operations.Operation
	if resp.Operation != nil {
		op = resp.Operation
		a.rememberProposed(ctx, c.Domain(), op, operations.OpenAPIAction(found.Method, found.Path))
		delete(j, "body")
		j["operation"] = opJSON(op)
		j["next"] = a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(op.ID))
	}
	a.out.emit(j)
	if op != nil {
		a.printProposed(domain, op)
		return nil
	}
	a.out.body(resp.Body)
	return nil
}

// body prints a body a Company sent (text output only): on a terminal,
// indented when it is JSON, with control characters escaped and newlines
// kept; elsewhere byte for byte, as it came.
func (o *output) body(b []byte) {
	if o.json {
		return
	}
	if !o.tty {
		_, _ = o.stdout.Write(b)
		return
	}
	var ind bytes.Buffer
	if json.Valid(b) && json.Indent(&ind, bytes.TrimRight(b, " \t\r\n"), "", "  ") == nil {
		_, _ = fmt.Fprint(o.stdout, escJSON(ind.String()), "\n")
		return
	}
	_, _ = fmt.Fprint(o.stdout, escText(strings.TrimSuffix(string(b), "\n")), "\n")
}

// escJSON makes indented JSON safe to print on a terminal and still the
// same JSON: a rune a terminal would act on (a control character, a bidi
// or other format character, a line or paragraph separator; valid JSON
// has them only inside strings) is written as its \u escape, and a byte
// that is not UTF-8 as \ufffd. Newlines and spaces, the indentation, stay.
func escJSON(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\ufffd`)
		case r == '\n' || r == ' ':
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029:
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// escText escapes what a terminal would act on in a Company's text of one
// or more lines, keeping the line breaks (esc escapes them too).
func escText(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = esc(l)
	}
	return strings.Join(lines, "\n")
}

// prettyBody indents a JSON body; other bodies are returned as they are.
func prettyBody(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) == nil {
		if p, err := json.MarshalIndent(v, "", "  "); err == nil {
			return string(p)
		}
	}
	return string(b)
}

// printPending reports, when err is an *operations.PendingError, that
// nothing was sent because the operation the same call proposed is still
// open (OPS 6), and shows it.
func (a *app) printPending(ctx context.Context, c *poppy.Company, err error) bool {
	pend := (*operations.PendingError)(nil)
	if !errors.As(err, &pend) || pend.Operation == nil {
		return false
	}
	op, domain := pend.Operation, c.Domain()
	a.rememberOp(ctx, domain, op, nil)
	next := a.cmdline("ops", "show", shellQuote(domain), shellQuote(op.ID))
	if op.State == operations.StateProposed {
		next = a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(op.ID))
	}
	a.out.emit(map[string]any{"pending": true, "operation": opJSON(op), "next": next})
	a.out.printf("%s\n", a.out.bold("Not sent: the operation this same call proposed is still "+esc(string(op.State))+"."))
	if op.State == operations.StateProposed {
		a.printProposed(domain, op)
		return true
	}
	a.out.printf("  %s\n", esc(op.Summary))
	a.out.printf("\nTo see where it is: %s\n", next)
	return true
}

// printProposed says that op is proposed and not done, and what to run.
func (a *app) printProposed(domain string, op *operations.Operation) {
	o := a.out
	o.printf("%s\n", o.bold("Proposed — not done until you approve:"))
	o.printf("  %s\n", esc(op.Summary))
	kv := []string{"  operation", esc(op.ID), "  revision", fmt.Sprint(op.Revision)}
	if !op.ExpiresAt.IsZero() {
		kv = append(kv, "  expires", op.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
	}
	o.kv(kv...) // one list: the labels aligned
	o.printf("\nTo review and approve it: %s\n", a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(op.ID)))
}

func newCmdMCP(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "List and call the tools of the Company's MCP servers",
		Example: `  poppy mcp tools example.com
  poppy mcp call example.com search_products '{"query":"jacket"}'`,
		GroupID: "apis",
	}
	cmd.AddCommand(newCmdMCPTools(a, nil), newCmdMCPCall(a, nil))
	return cmd
}

type mcpToolsOptions struct {
	app    *app
	Domain string
}

func newCmdMCPTools(a *app, runF func(context.Context, *mcpToolsOptions) error) *cobra.Command {
	opts := &mcpToolsOptions{app: a}
	return &cobra.Command{
		Use:   "tools DOMAIN",
		Short: "List the tools of the Company's MCP servers",
		Example: `  poppy mcp tools example.com
  poppy --json mcp tools example.com | jq '.tools[].name'`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runMCPTools(cmd.Context(), opts)
		},
	}
}

func runMCPTools(ctx context.Context, opts *mcpToolsOptions) error {
	a := opts.app
	c, s, err := a.session(ctx, opts.Domain)
	if err != nil {
		return err
	}
	type toolJSON struct {
		Server      string `json:"server"`
		Name        string `json:"name"`
		Description string `json:"description"`
		InputSchema any    `json:"input_schema"`
	}
	tools := []toolJSON{}
	err = a.eachMCP(ctx, c, s, func(m *api.MCP) (bool, error) {
		for t, err := range m.Tools(ctx) {
			if err != nil {
				return false, err
			}
			tools = append(tools, toolJSON{Server: m.Entry().URL, Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
		}
		return false, nil
	})
	if err != nil {
		return a.apiError(err, c, opts.Domain, nil)
	}
	a.out.emit(map[string]any{"domain": c.Domain(), "tools": tools})
	a.out.printf("%s at %s:\n", a.out.bold("MCP tools"), esc(c.Name()))
	if len(tools) == 0 {
		a.out.printf("  (none)\n")
	}
	for _, t := range tools {
		a.out.printf("  %-20s %s\n", esc(t.Name), esc(t.Description))
	}
	return nil
}

type mcpCallOptions struct {
	app       *app
	Domain    string
	Tool      string
	Arguments json.RawMessage
}

func newCmdMCPCall(a *app, runF func(context.Context, *mcpCallOptions) error) *cobra.Command {
	opts := &mcpCallOptions{app: a}
	return &cobra.Command{
		Use:   "call DOMAIN TOOL [JSON]",
		Short: "Call a tool of the Company's MCP server with JSON arguments",
		Long: `mcp call calls TOOL with the JSON object of arguments (default {}) over a
Bearer Session Token issued for that MCP server. A result that proposes an
operation is not done until you approve it with "poppy ops confirm".`,
		Example: `  poppy mcp call example.com search_products '{"query":"jacket"}'
  poppy --json mcp call example.com list_orders`,
		Args:              cobra.RangeArgs(2, 3),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain, opts.Tool = args[0], args[1]
			opts.Arguments = json.RawMessage(`{}`)
			if len(args) == 3 {
				if !json.Valid([]byte(args[2])) || !strings.HasPrefix(strings.TrimSpace(args[2]), "{") {
					return usageError{err: errors.New("poppy: the tool's arguments must be a JSON object")}
				}
				opts.Arguments = json.RawMessage(args[2])
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runMCPCall(cmd.Context(), opts)
		},
	}
}

func runMCPCall(ctx context.Context, opts *mcpCallOptions) error {
	a := opts.app
	domain, tool := opts.Domain, opts.Tool
	c, s, err := a.session(ctx, domain)
	if err != nil {
		return err
	}
	var res *api.ToolResult
	err = a.eachMCP(ctx, c, s, func(m *api.MCP) (bool, error) {
		for t, err := range m.Tools(ctx) {
			if err != nil {
				return false, err
			}
			if t.Name == tool {
				r, err := m.CallTool(ctx, tool, opts.Arguments)
				res = r
				return true, err
			}
		}
		return false, nil
	})
	if a.printPending(ctx, c, err) {
		return nil
	}
	if err != nil {
		return a.apiError(err, c, domain, nil)
	}
	if res == nil {
		return usageError{err: fmt.Errorf("poppy: no MCP server of %s has the tool %q", domain, tool),
			hint: "see: " + a.cmdline("mcp", "tools", shellQuote(domain))}
	}
	var texts []string
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	j := map[string]any{"tool": tool, "is_error": res.IsError, "text": append([]string{}, texts...), "structured_content": res.StructuredContent}
	var op *operations.Operation
	if res.Operation != nil {
		op = res.Operation
		a.rememberProposed(ctx, c.Domain(), op, operations.ToolAction(tool))
		j["operation"] = opJSON(op)
		j["next"] = a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(op.ID))
	}
	a.out.emit(j)
	if op != nil {
		a.printProposed(domain, op)
		return nil
	}
	if res.IsError {
		a.out.printf("%s\n", a.out.bold("The tool reported an error:"))
	}
	for _, t := range texts {
		a.out.printf("%s\n", escText(t))
	}
	if len(texts) == 0 && res.StructuredContent != nil {
		b, _ := json.MarshalIndent(res.StructuredContent, "", "  ")
		a.out.printf("%s\n", escText(string(b)))
	}
	if res.IsError {
		return errors.New("poppy: the tool failed")
	}
	return nil
}

// eachMCP connects to each of the Company's MCP servers in turn and calls
// fn until it reports done.
func (a *app) eachMCP(ctx context.Context, c *poppy.Company, s *poppy.Session, fn func(*api.MCP) (bool, error)) error {
	for _, e := range api.List(c) {
		if e.Type != api.TypeMCP {
			continue
		}
		mo := &api.MCPOptions{Logger: a.log}
		if oc, err := operations.New(s, nil); err == nil {
			mo.Operations = oc // OPS 6: see runAPI
		}
		m, err := api.ConnectMCP(ctx, s, e, mo)
		if err != nil {
			return err
		}
		done, err := fn(m)
		_ = m.Close()
		if err != nil || done {
			return err
		}
	}
	return nil
}
