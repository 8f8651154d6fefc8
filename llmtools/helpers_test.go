package llmtools_test

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

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

const domain = "example.test"

// exchangeMCP and exchangeAPI propose the fake's exchange operation.
const (
	exchangeMCP = "example_test__mcp_request_exchange"
	exchangeAPI = "example_test__api_exchangeItem"
	argsMCP     = `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`
	argsAPI     = `{"id":"ord_7Hk2","body":{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}}`
)

// gate is an Approver the test controls: until open it refuses as a User
// who hasn't answered; then it answers with decision.
type gate struct {
	mu       sync.Mutex
	open     bool
	decision operations.Decision
	asked    int
}

func (g *gate) Approve(_ context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked++
	if !g.open {
		return operations.Decline, fmt.Errorf("the User has not answered")
	}
	return g.decision, nil
}

func (g *gate) answer(d operations.Decision) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open, g.decision = true, d
}

type env struct {
	*testenv.Env
	k      *llmtools.Toolkit
	gate   *gate
	codes  []string // what the prompter showed the User
	codeMu sync.Mutex
}

// newEnv starts the fake, an agent listing the operations extension, and
// a Toolkit for "alice" whose Prompter approves sign-ins as the User.
// rt, when set, wraps the fake's transport.
func newEnv(t *testing.T, opts *llmtools.Options, rt func(http.RoundTripper) http.RoundTripper) *env {
	t.Helper()
	srv := poppytest.NewServer(t, nil)
	id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
	te := &testenv.Env{T: t, Srv: srv, ID: id, Key: key}
	te.Serve(nil)
	var ao poppy.AgentOptions
	if rt != nil {
		ao.HTTPClient = &http.Client{Transport: rt(srv.Client().Transport)}
	}
	te.Agent = te.NewAgent(&ao)
	e := &env{Env: te, gate: &gate{}}
	var o llmtools.Options
	if opts != nil {
		o = *opts
	}
	if opts == nil {
		o.Approver = e.gate // with opts, the test's Approver or none
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
	e.k = k
	return e
}

// call executes a tool and decodes its result.
func (e *env) call(t *testing.T, name, args string) map[string]any {
	t.Helper()
	out, err := e.k.Execute(ctx, name, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: result %s: %v", name, out, err)
	}
	return m
}

// signIn discovers the Company and signs in through poppy_sign_in.
func (e *env) signIn(t *testing.T) {
	t.Helper()
	e.call(t, "poppy_discover_company", `{"domain":"example.test"}`)
	if r := e.call(t, "poppy_sign_in", `{"domain":"example.test","scopes":["poppy:read","poppy:write"]}`); r["sign_in"] != "waiting_for_user" {
		t.Fatalf("sign-in: %v", r)
	}
	for range 500 {
		r := e.call(t, "poppy_sign_in", `{"domain":"example.test"}`)
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

// performed counts the exchanges the fake's backend carried out.
func (e *env) performed() int { return len(e.Srv.Operations().Performed()) }

// scriptedModel is a fake chat-completions server: each answer is the
// next of script, a list of tool calls ({name, arguments}) or, when empty,
// a final text. It records the requests.
type scriptedModel struct {
	*httptest.Server
	mu     sync.Mutex
	script []func(req map[string]any) []toolCall
	bodies []string
}

type toolCall struct{ Name, Args string }

func newModel(t *testing.T, script ...func(req map[string]any) []toolCall) *scriptedModel {
	m := &scriptedModel{script: script}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(b, &req)
		m.mu.Lock()
		m.bodies = append(m.bodies, string(b))
		var calls []toolCall
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

func calls(cs ...toolCall) func(map[string]any) []toolCall {
	return func(map[string]any) []toolCall { return cs }
}

func (m *scriptedModel) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bodies...)
}

func contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
