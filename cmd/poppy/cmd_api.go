package main

// poppy apis, api, mcp tools, mcp call: the Company's APIs (spec 6) in the
// Session, through package api. A 202 that proposes an operation (OPS 4.1,
// 4.2) is printed as proposed, never as done, with the "poppy ops confirm"
// to run; the operation is remembered (cmd_ops.go) so that a later process
// finds it by ID.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/operations"
)

// maxDataBytes bounds --data @file.
const maxDataBytes = 4 << 20

func addAPICommands(root *cobra.Command, a *app) {
	root.AddGroup(&cobra.Group{ID: "apis", Title: "The Company's APIs and operations:"})
	root.AddCommand(newAPIsCmd(a), newAPICmd(a), newMCPCmd(a))
}

type apiEntryJSON struct {
	Type        string `json:"type"`
	URL         string `json:"url"`
	Description string `json:"description"`
	Resource    string `json:"resource,omitempty"`
}

func newAPIsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "apis DOMAIN",
		Short: "List the Company's APIs (OpenAPI and MCP)",
		Long: `apis lists the APIs the Company offers to Personal Agents: OpenAPI
descriptions (call them with "poppy api") and MCP servers (see "poppy mcp").`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.company(cmd.Context(), args[0])
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
		},
	}
}

// session resolves domain and starts or resumes the profile's Session.
func (a *app) session(ctx context.Context, domain string) (*poppy.Company, *poppy.Session, error) {
	c, err := a.company(ctx, domain)
	if err != nil {
		return nil, nil, err
	}
	s, err := c.Session(ctx, a.profile, nil)
	if err != nil {
		return nil, nil, err
	}
	return c, s, nil
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
			return nil, usageError{fmt.Errorf("poppy: --data: %w", err)}
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
			return nil, usageError{errors.New("poppy: --data file is larger than 4 MiB")}
		}
		b = b[:n]
	}
	if !json.Valid(b) {
		return nil, usageError{errors.New("poppy: --data is not valid JSON")}
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

func newAPICmd(a *app) *cobra.Command {
	var data, entry string
	cmd := &cobra.Command{
		Use:   "api DOMAIN METHOD PATH",
		Short: "Call an operation of the Company's OpenAPI API",
		Long: `api calls METHOD PATH (a path of the description, such as /orders or
/orders/ord_1/exchanges) in your Session, with a DPoP-bound Session Token.
--data sends a JSON body, given inline or as @file.

An answer that proposes an operation (202) is not done: it waits for your
approval, which "poppy ops confirm DOMAIN ID" asks for.`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			domain, method, path := args[0], strings.ToUpper(args[1]), args[2]
			body, err := readData(data)
			if err != nil {
				return err
			}
			c, s, err := a.session(ctx, domain)
			if err != nil {
				return err
			}
			// With the operations extension, calls go through the
			// operations client: while an operation this same call proposed
			// is open, nothing is sent (OPS 6, PA-OPS6-04), even from an
			// earlier run of poppy, since proposals are journalled.
			var oo *api.OpenAPIOptions
			if oc, err := operations.New(s, nil); err == nil {
				oo = &api.OpenAPIOptions{Operations: oc}
			}
			var oa *api.OpenAPI
			var found *api.Operation
			for _, e := range api.List(c) {
				if e.Type != api.TypeOpenAPI || (entry != "" && e.URL != entry) {
					continue
				}
				o, err := api.LoadOpenAPI(ctx, s, e, oo)
				if err != nil {
					return err
				}
				if op, ok := o.Find(method, path); ok {
					oa, found = o, op
					break
				}
			}
			if oa == nil {
				return usageError{fmt.Errorf("poppy: no OpenAPI API of %s has %s %s (see: %s)", domain, method, path, a.cmdline("apis", shellQuote(domain)))}
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
				op, err = a.observeOperation(ctx, c, resp.Operation, operations.OpenAPIAction(found.Method, found.Path))
				if err != nil {
					return err
				}
				delete(j, "body")
				j["operation"] = opJSON(op)
				j["next"] = a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(op.ID))
			}
			a.out.emit(j)
			if op != nil {
				a.printProposed(domain, op)
				return nil
			}
			a.out.printf("%s\n", esc(prettyBody(resp.Body)))
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the JSON body, or @FILE to read it from a file")
	cmd.Flags().StringVar(&entry, "api", "", "the OpenAPI description URL to use, when the Company lists several")
	return cmd
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
	o.kv("  operation", esc(op.ID), "  revision", fmt.Sprint(op.Revision))
	if !op.ExpiresAt.IsZero() {
		o.kv("  expires", op.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
	}
	o.printf("\nTo review and approve it: %s\n", a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(op.ID)))
}

func newMCPCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "mcp",
		Short:   "List and call the tools of the Company's MCP servers",
		GroupID: "apis",
	}
	cmd.AddCommand(&cobra.Command{
		Use:               "tools DOMAIN",
		Short:             "List the tools of the Company's MCP servers",
		Args:              wrapArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, s, err := a.session(ctx, args[0])
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
				return a.apiError(err, c, args[0], nil)
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
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "call DOMAIN TOOL [JSON]",
		Short: "Call a tool of the Company's MCP server with JSON arguments",
		Long: `mcp call calls TOOL with the JSON object of arguments (default {}) over a
Bearer Session Token issued for that MCP server. A result that proposes an
operation is not done until you approve it with "poppy ops confirm".`,
		Args:              wrapArgs(cobra.RangeArgs(2, 3)),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			domain, tool := args[0], args[1]
			arg := json.RawMessage(`{}`)
			if len(args) == 3 {
				if !json.Valid([]byte(args[2])) || !strings.HasPrefix(strings.TrimSpace(args[2]), "{") {
					return usageError{errors.New("poppy: the tool's arguments must be a JSON object")}
				}
				arg = json.RawMessage(args[2])
			}
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
						r, err := m.CallTool(ctx, tool, arg)
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
				return usageError{fmt.Errorf("poppy: no MCP server of %s has the tool %q (see: %s)", domain, tool, a.cmdline("mcp", "tools", shellQuote(domain)))}
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
				op, err = a.observeOperation(ctx, c, res.Operation, operations.ToolAction(tool))
				if err != nil {
					return err
				}
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
				a.out.printf("%s\n", esc(t))
			}
			if len(texts) == 0 && res.StructuredContent != nil {
				b, _ := json.MarshalIndent(res.StructuredContent, "", "  ")
				a.out.printf("%s\n", esc(string(b)))
			}
			if res.IsError {
				return errors.New("poppy: the tool failed")
			}
			return nil
		},
	})
	return cmd
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
			mo.Operations = oc // OPS 6: see newAPICmd
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
