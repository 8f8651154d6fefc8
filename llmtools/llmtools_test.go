package llmtools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Every tool: a stable valid name, a description within MaxDescription
// and an input schema that compiles as JSON Schema 2020-12 (checked by
// New and AddCompany, which refuse a tool whose schema doesn't); no tool
// confirms an operation.
func TestToolsSchemasAndNames(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.Call(t, "poppy_discover_company", `{"domain":"example.test"}`)
	tools := e.K.Tools()
	if len(tools) < 10 {
		t.Fatalf("%d tools", len(tools))
	}
	names := map[string]bool{}
	for _, tool := range tools {
		if !toolName.MatchString(tool.Name) || names[tool.Name] {
			t.Errorf("bad or duplicate name %q", tool.Name)
		}
		names[tool.Name] = true
		if len(tool.Description) == 0 || len(tool.Description) > llmtools.MaxDescription {
			t.Errorf("%s: description of %d bytes", tool.Name, len(tool.Description))
		}
		if strings.Contains(strings.ToLower(tool.Name), "confirm") {
			t.Errorf("%s: a tool that confirms (OPS 5.1)", tool.Name)
		}
		var s map[string]any
		if json.Unmarshal(tool.InputSchema, &s) != nil || s["type"] != "object" {
			t.Errorf("%s: schema %s", tool.Name, tool.InputSchema)
		}
	}
	for _, n := range []string{"poppy_discover_company", "poppy_sign_in", "poppy_list_operations", "poppy_get_operation",
		"poppy_request_approval", exchangeMCP, exchangeAPI, "example_test__mcp_search_products"} {
		if !names[n] {
			t.Errorf("no tool %s", n)
		}
	}
	// The same Company gives the same names.
	e2 := newEnv(t, nil, nil)
	e2.Call(t, "poppy_discover_company", `{"domain":"example.test"}`)
	for i, tool := range e2.K.Tools() {
		if tool.Name != tools[i].Name {
			t.Errorf("name %d: %s then %s", i, tools[i].Name, tool.Name)
		}
	}
	// Arguments outside the schema are a result, not a call.
	if r := e.Call(t, "poppy_request_approval", `{"domain":"example.test","operation_id":"x","approved":true}`); r["error"] != "invalid_arguments" {
		t.Errorf("extra argument: %v", r)
	}
}

// A Company tool that proposes an operation: the model gets it PROPOSED,
// NOT DONE, the operations client holds it (it observed the tool call), and
// poppy_request_approval with the Approver's yes performs it once.
func TestProposeApproveThroughTools(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	r := e.Call(t, exchangeMCP, argsMCP)
	op, _ := r["operation"].(map[string]any)
	id, _ := op["operation_id"].(string)
	if id == "" || !strings.HasPrefix(r["approval"].(string), "PROPOSED, NOT DONE") {
		t.Fatalf("result: %v", r)
	}
	if got, err := e.K.Operations(domain).Get(ctx, id); err != nil || got.State != operations.StateProposed {
		t.Fatalf("client view: %v %v", got, err)
	}
	list := e.Call(t, "poppy_list_operations", `{}`)
	if ops := list["operations"].([]any); len(ops) != 1 {
		t.Fatalf("list: %v", list)
	}
	e.Gate.Answer(operations.Approve)
	r = e.Call(t, "poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
	if st := r["operation"].(map[string]any)["state"]; st != "succeeded" || e.Performed() != 1 {
		t.Fatalf("after approval: %v, performed %d", r, e.Performed())
	}
}

// A declined approval performs nothing and withdraws the proposal.
func TestDeclinedApproval(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	r := e.Call(t, exchangeAPI, argsAPI)
	id := r["operation"].(map[string]any)["operation_id"].(string)
	e.Gate.Answer(operations.Decline)
	r = e.Call(t, "poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
	if !strings.HasPrefix(r["approval"].(string), "DECLINED") || e.Performed() != 0 {
		t.Fatalf("declined: %v, performed %d", r, e.Performed())
	}
	if info, _ := e.Srv.Operations().Get(id); info.State != "cancelled" {
		t.Errorf("state at the Company: %s", info.State)
	}
}

// Without an Approver the model gets "waiting", and nothing is confirmed.
func TestNoApproverWaits(t *testing.T) {
	e := newEnv(t, &llmtools.Options{}, nil)
	e.SignIn(t)
	id := e.Call(t, exchangeMCP, argsMCP)["operation"].(map[string]any)["operation_id"].(string)
	r := e.Call(t, "poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
	if !strings.HasPrefix(r["approval"].(string), "WAITING") || e.Performed() != 0 {
		t.Fatalf("no Approver: %v, performed %d", r, e.Performed())
	}
	if r := e.Call(t, "poppy_get_operation", `{"domain":"example.test","operation_id":"`+id+`"}`); r["operation"].(map[string]any)["state"] != "proposed" {
		t.Errorf("get: %v", r)
	}
	// An ID the model made up is not read.
	if r := e.Call(t, "poppy_get_operation", `{"domain":"example.test","operation_id":"op_made_up"}`); r["error"] == nil {
		t.Errorf("made-up ID: %v", r)
	}
}

// An Approver that could not ask the User (an MCP host without
// elicitation) approves nothing; with Options.ApproveElsewhere the model is
// told to show the operation and where the User approves it themselves.
func TestApproveElsewhere(t *testing.T) {
	cantAsk := operations.ApproverFunc(func(context.Context, *operations.ApprovalRequest) (operations.Decision, error) {
		return operations.Decline, llmtools.ErrNoElicitation
	})
	e := newEnv(t, &llmtools.Options{Approver: cantAsk, ApproveElsewhere: func(domain, id string) string {
		return "poppy ops confirm " + domain + " " + id
	}}, nil)
	e.SignIn(t)
	id := e.Call(t, exchangeMCP, argsMCP)["operation"].(map[string]any)["operation_id"].(string)
	r := e.Call(t, "poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
	want := "poppy ops confirm example.test " + id
	note, _ := r["approval"].(string)
	if r["approve_with"] != want || !strings.Contains(note, want) || !strings.Contains(note, "elicitation") || e.Performed() != 0 {
		t.Fatalf("approval: %v, performed %d", r, e.Performed())
	}
	if info, _ := e.Srv.Operations().Get(id); info.State != "proposed" {
		t.Errorf("state at the Company: %s", info.State)
	}
}

// Without a Prompter, sign-in is the User's to do elsewhere.
func TestSignInWithoutPrompter(t *testing.T) {
	e := newEnv(t, nil, nil)
	k, err := llmtools.New(e.Agent, "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	e.K = k
	e.Call(t, "poppy_discover_company", `{"domain":"example.test"}`)
	if r := e.Call(t, "poppy_sign_in", `{"domain":"example.test"}`); r["sign_in"] != "unavailable" {
		t.Errorf("sign-in without a Prompter: %v", r)
	}
}

// The conversation tools: start a conversation, send in it and read it;
// the Company's replies come back up to the end of its turn (PA-7.7-02).
func TestConversationTools(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	r := e.Call(t, "poppy_start_conversation", `{"domain":"example.test","text":"Hello, where is my order?"}`)
	id, _ := r["conversation_id"].(string)
	msgs, _ := r["messages"].([]any)
	if id == "" || len(msgs) == 0 || r["status"] == "working" {
		t.Fatalf("start: %v", r)
	}
	r = e.Call(t, "poppy_send_message", `{"domain":"example.test","conversation_id":"`+id+`","text":"Thank you."}`)
	if msgs, _ := r["messages"].([]any); len(msgs) == 0 || r["conversation_id"] != id {
		t.Fatalf("send: %v", r)
	}
	r = e.Call(t, "poppy_read_conversation", `{"domain":"example.test","conversation_id":"`+id+`"}`)
	if msgs, _ := r["messages"].([]any); len(msgs) != 0 || r["conversation_id"] != id {
		t.Fatalf("read after the turn: %v", r)
	}
	if r := e.Call(t, "poppy_read_conversation", `{"domain":"example.test","conversation_id":"conv_nope"}`); r["error"] == nil {
		t.Fatalf("unknown conversation: %v", r)
	}
}

// A model that calls the proposing tool again while its operation is open
// proposes nothing new: it gets the open operation back, marked pending
// (OPS 6, PA-OPS6-04, A-38). Once the operation is final, the same call
// proposes again.
func TestPA_OPS6_04_NoSecondProposalFromATool(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	first := e.Call(t, exchangeAPI, argsAPI)
	id := first["operation"].(map[string]any)["operation_id"].(string)
	again := e.Call(t, exchangeAPI, argsAPI)
	if again["error"] != "operation_pending" || again["operation"].(map[string]any)["operation_id"] != id ||
		!strings.HasPrefix(fmt.Sprint(again["approval"]), "PROPOSED, NOT DONE") {
		t.Fatalf("second call: %v", again)
	}
	// PA-OPS6-04: the fake saw one proposal.
	if n := len(e.Srv.Operations().All()); n != 1 {
		t.Fatalf("%d operations at the Company, want 1", n)
	}
	// Declined, hence final: now the same call may propose again.
	e.Gate.Answer(operations.Decline)
	e.Call(t, "poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
	third := e.Call(t, exchangeAPI, argsAPI)
	if op, _ := third["operation"].(map[string]any); op == nil || op["operation_id"] == id || third["error"] != nil {
		t.Fatalf("after the decline: %v", third)
	}
	if n := len(e.Srv.Operations().All()); n != 2 {
		t.Fatalf("%d operations at the Company, want 2", n)
	}
}

// The same for the Company's MCP tools (PA-OPS6-04).
func TestPA_OPS6_04_NoSecondProposalFromAnMCPTool(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	id := e.Call(t, exchangeMCP, argsMCP)["operation"].(map[string]any)["operation_id"].(string)
	before := e.Srv.Counts().Requests
	again := e.Call(t, exchangeMCP, argsMCP)
	if again["error"] != "operation_pending" || again["operation"].(map[string]any)["operation_id"] != id {
		t.Fatalf("second call: %v", again)
	}
	if n := e.Srv.Counts().Requests - before; n != 0 {
		t.Fatalf("%d requests for the second call, want none", n)
	}
}
