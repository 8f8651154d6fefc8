// Package llmtest is what the tests of package llmtools and of its model
// adapters (llmtools/openai, a module of its own) share: the fake Company
// with an agent, a Toolkit signed in through its own tools, an Approver the
// test answers, and a scripted chat-completions model.
package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// The fake's exchange operation, proposed through its MCP tool or its API.
const (
	ExchangeMCP = "example_test__mcp_request_exchange"
	ExchangeAPI = "example_test__api_exchangeItem"
	ArgsMCP     = `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`
	ArgsAPI     = `{"id":"ord_7Hk2","body":{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}}`
)

// Gate is an Approver the test controls: until Answer it refuses as a User
// who hasn't answered; then it answers with the decision given.
type Gate struct {
	mu       sync.Mutex
	open     bool
	decision operations.Decision
	asked    int
}

// Approve implements operations.Approver.
func (g *Gate) Approve(_ context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked++
	if !g.open {
		return operations.Decline, fmt.Errorf("the User has not answered")
	}
	return g.decision, nil
}

// Answer makes every later approval d.
func (g *Gate) Answer(d operations.Decision) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open, g.decision = true, d
}

// Asked is how many times the Approver was asked.
func (g *Gate) Asked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.asked
}

// Env is the fake Company, an agent and a Toolkit for "alice".
type Env struct {
	*testenv.Env
	K    *llmtools.Toolkit
	Gate *Gate

	codeMu sync.Mutex
	codes  []string // what the prompter showed the User
}

// New starts the fake, an agent listing the operations extension, and a
// Toolkit for "alice" whose Prompter approves sign-ins as the User. With
// opts nil the Toolkit's Approver is the Gate; with opts, the test's
// Approver or none. rt, when set, wraps the fake's transport.
func New(t *testing.T, opts *llmtools.Options, rt func(http.RoundTripper) http.RoundTripper) *Env {
	t.Helper()
	return NewWith(t, nil, opts, rt)
}

// NewWith is New with the fake started with srvOpts.
func NewWith(t *testing.T, srvOpts *poppytest.Options, opts *llmtools.Options, rt func(http.RoundTripper) http.RoundTripper) *Env {
	t.Helper()
	srv := poppytest.NewServer(t, srvOpts)
	id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
	te := &testenv.Env{T: t, Srv: srv, ID: id, Key: key}
	te.Serve(nil)
	var ao poppy.AgentOptions
	if rt != nil {
		ao.HTTPClient = &http.Client{Transport: rt(srv.Client().Transport)}
	}
	te.Agent = te.NewAgent(&ao)
	e := &Env{Env: te, Gate: &Gate{}}
	var o llmtools.Options
	if opts != nil {
		o = *opts
	}
	if opts == nil {
		o.Approver = e.Gate
	}
	if o.Prompter == nil {
		o.Prompter = signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
			e.codeMu.Lock()
			e.codes = append(e.codes, p.UserCode, p.VerificationURIComplete)
			e.codeMu.Unlock()
			_, err := srv.Browse(ctx, p.VerificationURIComplete)
			return err
		}}
	}
	k, err := llmtools.New(te.Agent, "alice", &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	e.K = k
	return e
}

// Codes is what the Prompter showed the User: each user code and its
// verification URI.
func (e *Env) Codes() []string {
	e.codeMu.Lock()
	defer e.codeMu.Unlock()
	return append([]string(nil), e.codes...)
}

// Call executes a tool and decodes its result.
func (e *Env) Call(t *testing.T, name, args string) map[string]any {
	t.Helper()
	out, err := e.K.Execute(context.Background(), name, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: result %s: %v", name, out, err)
	}
	return m
}

// SignIn discovers the Company and signs in through poppy_sign_in.
func (e *Env) SignIn(t *testing.T) {
	t.Helper()
	e.Call(t, "poppy_discover_company", `{"domain":"example.test"}`)
	if r := e.Call(t, "poppy_sign_in", `{"domain":"example.test","scopes":["poppy:read","poppy:write"]}`); r["sign_in"] != "waiting_for_user" {
		t.Fatalf("sign-in: %v", r)
	}
	for range 500 {
		r := e.Call(t, "poppy_sign_in", `{"domain":"example.test"}`)
		switch r["sign_in"] {
		case "waiting_for_user":
			time.Sleep(10 * time.Millisecond)
			continue
		case "done":
			return
		default:
			t.Fatalf("sign-in: %v", r)
		}
	}
	t.Fatal("sign-in never ended")
}

// Performed counts the exchanges the fake's backend carried out.
func (e *Env) Performed() int { return len(e.Srv.Operations().Performed()) }

// Model is a fake chat-completions server: each answer is the next of its
// script, a list of tool calls or, when empty, a final text "done". It
// records the requests.
type Model struct {
	*httptest.Server
	mu     sync.Mutex
	script []func(req map[string]any) []ToolCall
	bodies []string
}

// ToolCall is one call a scripted answer makes.
type ToolCall struct{ Name, Args string }

// NewModel starts a scripted model, closed when the test ends.
func NewModel(t *testing.T, script ...func(req map[string]any) []ToolCall) *Model {
	m := &Model{script: script}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(b, &req)
		m.mu.Lock()
		m.bodies = append(m.bodies, string(b))
		var calls []ToolCall
		n := len(m.bodies)
		if n <= len(m.script) {
			calls = m.script[n-1](req)
		}
		m.mu.Unlock()
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
		json.NewEncoder(w).Encode(map[string]any{"id": "cmpl", "object": "chat.completion", "created": 1, "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}})
	}))
	t.Cleanup(m.Close)
	return m
}

// Calls is a script step that makes the calls cs whatever the request.
func Calls(cs ...ToolCall) func(map[string]any) []ToolCall {
	return func(map[string]any) []ToolCall { return cs }
}

// Requests are the request bodies the model received.
func (m *Model) Requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bodies...)
}

// Contains reports whether s contains every one of subs.
func Contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
