package main

// poppy mcp-server through the go-sdk client over a command transport
// (the poppy binary the tests install), and poppy ask against a scripted
// chat-completions server, both against the in-process fake Company.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy/poppytest"
)

const (
	exchangeTool = "example_test__mcp_request_exchange"
	exchangeArgs = `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`
)

// The MCP server shares the CLI's sign-in (poppy signin before it
// starts), lists the tools, calls a Company tool, starts a conversation,
// and confirms an operation only when the host's elicitation answer is
// accept (PA-OPS5-03: the approval is the User's, in the host's UI).
func TestMCPServerCommand(t *testing.T) {
	for _, tc := range []struct {
		answer    string
		performed int
		note      string
	}{{"accept", 1, "The User's approval was given"}, {"decline", 0, "DECLINED"}} {
		t.Run(tc.answer, func(t *testing.T) {
			e := newCLIEnv(t, &poppytest.Options{})
			e.init()
			e.deviceSignIn(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var mu sync.Mutex
			var asked []string
			client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					mu.Lock()
					asked = append(asked, req.Params.Message)
					mu.Unlock()
					return &mcp.ElicitResult{Action: tc.answer, Content: map[string]any{"approve": tc.answer == "accept"}}, nil
				}})
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: e.command(nil, "mcp-server", "example.test")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			lt, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]bool{}
			for _, tool := range lt.Tools {
				found[tool.Name] = true
			}
			for _, n := range []string{"poppy_discover_company", "poppy_request_approval", exchangeTool, "example_test__mcp_search_products"} {
				if !found[n] {
					t.Fatalf("no tool %s in %v", n, found)
				}
			}
			call := func(name, args string) map[string]any {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &m); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return m
			}
			if r := call("example_test__mcp_search_products", `{"query":"fleece"}`); r["structured"] == nil {
				t.Fatalf("search: %v", r)
			}
			if r := call("poppy_start_conversation", `{"domain":"example.test","text":"Hello."}`); r["conversation_id"] == nil || len(r["messages"].([]any)) == 0 {
				t.Fatalf("conversation: %v", r)
			}
			r := call(exchangeTool, exchangeArgs)
			op, _ := r["operation"].(map[string]any)
			id, _ := op["operation_id"].(string)
			if id == "" {
				t.Fatalf("no operation: %v", r)
			}
			if n := len(e.srv.Operations().Performed()); n != 0 {
				t.Fatalf("performed %d before any approval", n)
			}
			r = call("poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
			approval, _ := r["approval"].(string)
			if !strings.Contains(approval, tc.note) || len(e.srv.Operations().Performed()) != tc.performed {
				t.Fatalf("approval: %v, performed %d", r, len(e.srv.Operations().Performed()))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) != 1 || !strings.Contains(asked[0], "Approve this operation") {
				t.Fatalf("elicitations: %q", asked)
			}
		})
	}
}

// An MCP host that can't elicit approves nothing, and the model is told
// to show the User the operation and to have them run "poppy ops confirm
// DOMAIN ID"; the operation stays proposed.
func TestMCPServerWithoutElicitation(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{})
	e.init()
	e.deviceSignIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil) // no ElicitationHandler
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: e.command(nil, "mcp-server", "example.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name, args string) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	op, _ := call(exchangeTool, exchangeArgs)["operation"].(map[string]any)
	id, _ := op["operation_id"].(string)
	if id == "" {
		t.Fatalf("no operation: %v", op)
	}
	r := call("poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
	approval, _ := r["approval"].(string)
	want := "poppy ops confirm example.test " + id
	if r["approve_with"] != want || !strings.Contains(approval, want) || !strings.Contains(approval, "summary and terms") ||
		!strings.Contains(approval, "elicitation") {
		t.Fatalf("the model is not told what to show and where the User approves: %v", r)
	}
	if n := len(e.srv.Operations().Performed()); n != 0 {
		t.Fatalf("performed %d without the User", n)
	}
	if out := e.mustRun("--json", "ops", "show", "example.test", id); !strings.Contains(out, `"state":"proposed"`) {
		t.Fatalf("the operation changed: %s", out)
	}
}

// skipWithoutAsk skips a test of poppy ask's run in a build without it
// (the build tag openai, cmd_llm.go); .ci/run runs them with the tag.
func skipWithoutAsk(t *testing.T) {
	t.Helper()
	if !askBuilt {
		t.Skip("poppy ask runs only in a build with the tag openai: go test -tags openai")
	}
}

// fakeModel is a scripted chat-completions server: answer n is script[n]
// given the request, a list of tool calls or (nil) the final text "done".
type fakeModel struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
	auth   []string
}

type modelCall struct{ Name, Args string }

func newFakeModel(t *testing.T, script ...func(body string) []modelCall) *fakeModel {
	m := &fakeModel{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.bodies = append(m.bodies, string(b))
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		n := len(m.bodies)
		m.mu.Unlock()
		var calls []modelCall
		if n <= len(script) {
			calls = script[n-1](string(b))
		}
		msg := map[string]any{"role": "assistant", "content": "done"}
		finish := "stop"
		if len(calls) > 0 {
			var tcs []any
			for i, c := range calls {
				tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": c.Args}})
			}
			msg = map[string]any{"role": "assistant", "content": "", "tool_calls": tcs}
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "cmpl", "object": "chat.completion", "created": 1, "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}})
	}))
	t.Cleanup(m.Close)
	return m
}

var opIDInBody = regexp.MustCompile(`operation_id\\":\\"([^"\\]+)\\"`)

// exchangeScript: propose the exchange, ask the User's approval of it,
// then finish.
func exchangeScript() []func(string) []modelCall {
	return []func(string) []modelCall{
		func(string) []modelCall { return []modelCall{{exchangeTool, exchangeArgs}} },
		func(body string) []modelCall {
			m := opIDInBody.FindStringSubmatch(body)
			if m == nil {
				return nil
			}
			return []modelCall{{"poppy_request_approval", `{"domain":"example.test","operation_id":"` + m[1] + `"}`}}
		},
	}
}

// poppy ask: each step as a JSON line; the operation is confirmed only
// after the User types "yes" on the terminal, and declined otherwise
// (PA-OPS5-03); the API key is sent to the model server and never shown.
func TestPTYAsk(t *testing.T) {
	skipWithoutAsk(t)
	for _, tc := range []struct {
		typed     string
		performed int
		note      string
	}{
		{"yes", 1, "The User's approval was given"},
		{"no", 0, "DECLINED"},
		// Answers that are neither: asked again, then
		// no answer; the operation stays proposed, and the model is told
		// where the User approves it.
		{"y\rok\rsure", 0, `approve it themselves with: poppy ops confirm example.test exc_`},
	} {
		t.Run(strings.ReplaceAll(tc.typed, "\r", "_"), func(t *testing.T) {
			e := newCLIEnv(t, &poppytest.Options{})
			e.init()
			e.deviceSignIn(t)
			model := newFakeModel(t, exchangeScript()...)
			const key = "sk-test-secret-key-1234567890"
			ptmx, screen, wait := onPTY(t, e.command([]string{"OPENAI_API_KEY=" + key}, "--json", "ask", "example.test",
				"exchange my jacket for size M", "--base-url", model.URL+"/v1/", "--model", "scripted", "--max-steps", "5"))
			screen.waitFor(t, regexp.MustCompile(`Type "yes" to approve`), 30*time.Second)
			if n := len(e.srv.Operations().Performed()); n != 0 {
				t.Fatalf("performed %d before the User answered", n)
			}
			if _, err := ptmx.WriteString(tc.typed + "\r"); err != nil {
				t.Fatal(err)
			}
			if code := wait(); code != 0 {
				t.Fatalf("exit %d; the screen shows:\n%s", code, screen.String())
			}
			s := screen.String()
			if n := len(e.srv.Operations().Performed()); n != tc.performed {
				t.Fatalf("performed %d, want %d:\n%s", n, tc.performed, s)
			}
			if !strings.Contains(s, `"kind":"tool","tool":"poppy_request_approval"`) || !strings.Contains(s, tc.note) ||
				!strings.Contains(s, `"answer":"done"`) || !strings.Contains(s, `"step":1,"kind":"model"`) {
				t.Fatalf("steps not shown; the screen shows:\n%s", s)
			}
			if strings.Contains(s, key) {
				t.Fatal("the API key reached the screen")
			}
			if tc.performed == 0 && tc.typed != "no" {
				id := regexp.MustCompile(`"operation_id":"(exc_[^"]+)"`).FindStringSubmatch(s)
				if id == nil {
					t.Fatalf("no operation on the screen:\n%s", s)
				}
				if out := e.mustRun("--json", "ops", "show", "example.test", id[1]); !strings.Contains(out, `"state":"proposed"`) {
					t.Fatalf("no answer changed the operation: %s", out)
				}
			}
			model.mu.Lock()
			defer model.mu.Unlock()
			if len(model.bodies) != 3 || model.auth[0] != "Bearer "+key {
				t.Fatalf("model calls: %d, auth %q", len(model.bodies), model.auth)
			}
		})
	}
}

// Without a terminal on stdin, ask approves nothing, even when the piped
// stdin says "yes"; --max-steps bounds the model calls.
func TestAskNoTerminal(t *testing.T) {
	skipWithoutAsk(t)
	e := newCLIEnv(t, &poppytest.Options{})
	e.init()
	e.deviceSignIn(t)
	model := newFakeModel(t, exchangeScript()...)
	cmd := e.command(nil, "--json", "ask", "example.test", "exchange it", "--base-url", model.URL+"/v1/", "--model", "scripted")
	cmd.Stdin = strings.NewReader("yes\nyes\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if n := len(e.srv.Operations().Performed()); n != 0 {
		t.Fatalf("performed %d from a piped stdin:\n%s", n, out)
	}
	if !strings.Contains(string(out), `"tool":"poppy_request_approval"`) {
		t.Fatalf("no approval step:\n%s", out)
	}
	// The model is told where the User approves it themselves.
	if !regexp.MustCompile(`"approve_with":"poppy ops confirm example.test exc_[^"]+"`).Match(out) {
		t.Fatalf("the model is not told to have the User run poppy ops confirm:\n%s", out)
	}
	// A model that never stops is stopped after --max-steps model calls.
	loop := func(string) []modelCall { return []modelCall{{"poppy_list_operations", `{"domain":"example.test"}`}} }
	m2 := newFakeModel(t, loop, loop, loop, loop, loop)
	_, errOut, code := e.run("ask", "example.test", "loop", "--base-url", m2.URL+"/v1/", "--model", "scripted", "--max-steps", "2")
	m2.mu.Lock()
	n := len(m2.bodies)
	m2.mu.Unlock()
	if code != exitError || n != 2 || !strings.Contains(errOut, "step limit") {
		t.Fatalf("exit %d after %d model calls: %s", code, n, errOut)
	}
}
