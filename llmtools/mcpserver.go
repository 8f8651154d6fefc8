package llmtools

// The Toolkit as an MCP server (go-sdk). The tool handler puts the call's
// MCP state into the context, so that the approver of Options.Elicitation
// (elicit) reaches the User
// through the host's own UI: it adds an input request (SEP-2322) and the
// call ends; the host asks the User and calls again with the answer, and
// Client.Handle, run again, takes it. A host without elicitation gets a
// refusal, never an approval.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy/operations"
)

// errNoElicitation is the error of an approval asked with
// Options.Elicitation when the MCP host can't ask the User, or the call
// was not served over MCP. The model is told where else the User can
// approve (Options.ApproveElsewhere).
var errNoElicitation = errors.New("llmtools: the MCP host does not support elicitation, so the User can't be asked")

// errNeedInput ends a call whose approval is asked of the User as an
// input request (multi round-trip, SEP-2322); the host retries it with
// the User's answer.
var errNeedInput = errors.New("llmtools: waiting for the User's answer in the MCP host")

type callKey struct{}

// mcpCall is the state of one tool call served over MCP.
type mcpCall struct {
	ss        *mcp.ServerSession
	responses mcp.InputResponseMap
	pending   mcp.InputRequestMap
	st        *serverState
}

// serverState remembers the input requests the server issued, so that an
// answer is taken only for a question asked, about that revision, once.
type serverState struct {
	mu     sync.Mutex
	issued map[string]string // input request ID → operation ID and revision
}

// elicit is the Approver of Options.Elicitation: it asks the User to
// approve an operation through MCP elicitation, in the host's UI (a form
// with one boolean, "approve"), as an input request of the tool call
// (go-sdk sends it as elicitation/create to hosts of earlier protocol
// versions). Only an "accept" answer with approve true, to a question this
// server asked about this revision, approves; decline, cancel, an answer
// nobody asked for, or a host without elicitation never do. It reaches the
// call's MCP state through ctx, which the server's tool handler sets: the
// one value carried that way, never exported.
func elicit(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	call, _ := ctx.Value(callKey{}).(*mcpCall)
	if call == nil {
		return operations.Decline, errNoElicitation
	}
	if ip := call.ss.InitializeParams(); ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return operations.Decline, errNoElicitation
	}
	subject := fmt.Sprintf("%s#%d", req.OperationID, req.Revision)
	call.st.mu.Lock()
	defer call.st.mu.Unlock()
	for id, r := range call.responses {
		if call.st.issued[id] != subject {
			continue
		}
		delete(call.st.issued, id) // one answer per question
		if er, ok := r.(*mcp.ElicitResult); ok && er.Action == "accept" && er.Content["approve"] == true {
			return operations.Approve, nil
		}
		return operations.Decline, nil
	}
	msg := fmt.Sprintf("%s (%s) proposes:\n\n%s\n\nApprove this operation (%s, revision %d)?",
		plain(req.Company, 200), req.Domain, plain(req.Summary, 2000), plain(req.OperationID, 128), req.Revision)
	if req.Reason != "" {
		msg += "\n(asked again: " + req.Reason + ")"
	}
	id := "approve-" + rand.Text()
	if len(call.st.issued) >= maxOps {
		clear(call.st.issued)
	}
	call.st.issued[id] = subject
	if call.pending == nil {
		call.pending = mcp.InputRequestMap{}
	}
	call.pending[id] = &mcp.ElicitParams{Mode: "form", Message: msg, RequestedSchema: map[string]any{
		"type": "object", "properties": map[string]any{"approve": map[string]any{"type": "boolean", "title": "Approve"}},
		"required": []string{"approve"},
	}}
	return operations.Decline, errNeedInput
}

// MCPServerOptions configures NewMCPServer.
type MCPServerOptions struct {
	// Name and Version identify the server to hosts. Defaults "poppy"
	// and "0.1".
	Name, Version string
}

// NewMCPServer returns an MCP server offering the Toolkit's tools. Tools
// of a Company discovered through poppy_discover_company are added as they
// come (hosts get tools/list_changed). Build the Toolkit with
// Options.Elicitation so that approvals reach the User in the host's UI. Serve it with Server.Run over mcp.StdioTransport.
func NewMCPServer(k *Toolkit, opts *MCPServerOptions) *mcp.Server {
	var o MCPServerOptions
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		o.Name = "poppy"
	}
	if o.Version == "" {
		o.Version = "0.1"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: o.Name, Version: o.Version}, nil)
	st := &serverState{issued: map[string]string{}}
	var mu sync.Mutex
	added := map[string]bool{}
	var refresh func()
	refresh = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, t := range k.Tools() {
			if added[t.Name] {
				continue
			}
			added[t.Name] = true
			name := t.Name
			s.AddTool(&mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema},
				func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					call := &mcpCall{ss: req.Session, responses: req.Params.InputResponses, st: st}
					out, err := k.Execute(context.WithValue(ctx, callKey{}, call), name, req.Params.Arguments)
					if err != nil {
						return nil, err
					}
					if len(call.pending) > 0 { // ask the User, then the host calls again
						return &mcp.CallToolResult{InputRequests: call.pending}, nil
					}
					if name == "poppy_discover_company" {
						refresh() // the Company's tools
					}
					var sc map[string]any
					_ = json.Unmarshal(out, &sc)
					_, isErr := sc["error"]
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}, IsError: isErr}, nil
				})
		}
	}
	refresh()
	return s
}
