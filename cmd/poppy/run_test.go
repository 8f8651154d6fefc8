package main

// The commands' logic called directly (gh's shape): each runX with its
// options, in this process, against an in-process fake Company whose
// client and clock the run's environment gives the Agent; and each
// newCmdX with a runF that sees the options the command line filled.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// runEnv is a keystore with an agent identity, served to an in-process
// fake Company.
type runEnv struct {
	t     *testing.T
	srv   *poppytest.Server
	state string
	env   *environment
}

func newRunEnv(t *testing.T, opts *poppytest.Options) *runEnv {
	t.Helper()
	srv := poppytest.NewServer(t, opts)
	r := &runEnv{t: t, srv: srv, state: filepath.Join(t.TempDir(), "ks.db"), env: &environment{
		getenv:     func(k string) string { return map[string]string{"POPPY_PROFILE": "alice", "NO_COLOR": "1"}[k] },
		httpClient: srv.Client(), clock: srv.Clock(),
	}}
	a, _ := r.app("", false, nil)
	if err := runInit(context.Background(), &initOptions{app: a, BaseURL: "https://agent.test/poppy/"}); err != nil {
		t.Fatal(err)
	}
	agent, err := a.loadAgent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	direct, err := signin.NewDirect(agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", agent.Identity().Handler(direct.Handler()))
	return r
}

// app returns the app of one run with stdin and the stdout given (a
// buffer when nil), set up as the global flags would be.
func (r *runEnv) app(stdin string, jsonOut bool, stdout io.Writer) (*app, *bytes.Buffer) {
	r.t.Helper()
	buf := &bytes.Buffer{}
	if stdout == nil {
		stdout = buf
	}
	a := newApp(newInput(context.Background(), strings.NewReader(stdin)), stdout, io.Discard, r.env)
	a.statePath, a.jsonOut = r.state, jsonOut
	if err := a.setup(nil); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(a.close)
	return a, buf
}

// browsingScreen is a stdout whose User opens the Device Sign-In link it
// shows.
type browsingScreen struct {
	srv *poppytest.Server
	mu  sync.Mutex
	buf bytes.Buffer
}

var deviceLink = regexp.MustCompile(`or open (https://\S+)`)

func (s *browsingScreen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if m := deviceLink.FindSubmatch(p); m != nil {
		if _, err := s.srv.Browse(context.Background(), string(m[1])); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// signIn signs alice in with poppy:read and poppy:write through runSignIn.
func (r *runEnv) signIn() {
	r.t.Helper()
	a, _ := r.app("", false, &browsingScreen{srv: r.srv})
	if err := runSignIn(context.Background(), &signInOptions{app: a, Domain: "example.test", Method: "device", Scopes: []string{"poppy:read", "poppy:write"}}); err != nil {
		r.t.Fatal(err)
	}
}

// propose has the Company propose an exchange through runAPI and returns
// the operation's ID.
func (r *runEnv) propose(order string) string {
	r.t.Helper()
	a, out := r.app("", true, nil)
	err := runAPI(context.Background(), &apiOptions{app: a, Domain: "example.test", Method: "POST", Path: "/orders/" + order + "/exchanges",
		Data: `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`})
	if err != nil {
		r.t.Fatal(err)
	}
	var j struct {
		Operation struct {
			ID string `json:"operation_id"`
		} `json:"operation"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.Operation.ID == "" {
		r.t.Fatalf("no operation: %v %s", err, out)
	}
	return j.Operation.ID
}

func (r *runEnv) opState(id string) string {
	info, _ := r.srv.Operations().Get(id)
	return info.State
}

// runOpsConfirm: a stdin that is not a terminal is never an answer, "yes"
// or "no" (errNoAnswer, the operation stays proposed); --approve is.
func TestRunOpsConfirm(t *testing.T) {
	r := newRunEnv(t, nil)
	r.signIn()
	for _, stdin := range []string{"yes\n", "no\n", ""} {
		id := r.propose("ord_1")
		a, _ := r.app(stdin, false, nil)
		err := runOpsConfirm(context.Background(), &opsConfirmOptions{opOptions: opOptions{app: a, Domain: "example.test", ID: id}})
		var he *hintError
		if !errors.Is(err, errNoAnswer) || !errors.As(err, &he) || he.code != exitNoAnswer {
			t.Fatalf("stdin %q: %v", stdin, err)
		}
		if st := r.opState(id); st != "proposed" {
			t.Fatalf("stdin %q: the operation is %s", stdin, st)
		}
		if _, err := runOpsCancelFor(r, id); err != nil {
			t.Fatal(err)
		}
	}
	id := r.propose("ord_2")
	a, out := r.app("", false, nil)
	if err := runOpsConfirm(context.Background(), &opsConfirmOptions{opOptions: opOptions{app: a, Domain: "example.test", ID: id}, Approve: true}); err != nil {
		t.Fatal(err)
	}
	if st := r.opState(id); st != "succeeded" || !strings.Contains(out.String(), "Approved with --approve") {
		t.Fatalf("--approve: the operation is %s:\n%s", st, out)
	}
}

func runOpsCancelFor(r *runEnv, id string) (string, error) {
	a, out := r.app("", false, nil)
	err := runOpsCancel(context.Background(), &opOptions{app: a, Domain: "example.test", ID: id})
	return out.String(), err
}

// runAPI with a stdout that is not a terminal writes the body as the
// Company sent it, byte for byte.
func TestRunAPIBodyAsSent(t *testing.T) {
	r := newRunEnv(t, nil)
	body := "{\"b\":[1,2.50,3e2],\"a\":\"\u202e\",\n \"c\":null}\n"
	a, out := r.app("", false, nil)
	if err := runAPI(context.Background(), &apiOptions{app: a, Domain: "example.test", Method: "POST", Path: "/echo", Data: body}); err != nil {
		t.Fatal(err)
	}
	if out.String() != body {
		t.Fatalf("stdout %q, want the body %q", out, body)
	}
}

// escJSON, for a terminal: a rune a terminal acts on becomes its JSON
// escape, and the JSON means the same.
func TestEscJSON(t *testing.T) {
	in := "{\n  \"name\": \"Evil\u202e Shop\u0085\u2028\U000E0001\",\n  \"n\": 2.50\n}"
	got := escJSON(in)
	want := "{\n  \"name\": \"Evil\\u202e Shop\\u0085\\u2028\\udb40\\udc01\",\n  \"n\": 2.50\n}"
	if got != want {
		t.Fatalf("escJSON = %q\nwant %q", got, want)
	}
	var a, b any
	if json.Unmarshal([]byte(in), &a) != nil || json.Unmarshal([]byte(got), &b) != nil {
		t.Fatal("not JSON")
	}
	if ja, _ := json.Marshal(a); string(ja) != string(must(json.Marshal(b))) {
		t.Fatalf("the JSON changed: %v vs %v", a, b)
	}
	if escJSON("\xff") != `\ufffd` {
		t.Fatalf("invalid UTF-8: %q", escJSON("\xff"))
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Each newCmdX fills its options from the command line and hands them to
// runF; a usage error stops before it.
func TestNewCmdOptions(t *testing.T) {
	a := newApp(newInput(context.Background(), nil), io.Discard, io.Discard, nil)
	parse := func(c *cobra.Command, args ...string) error {
		c.SetArgs(args)
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		c.SilenceErrors, c.SilenceUsage = true, true
		return c.Execute()
	}
	var confirm *opsConfirmOptions
	if err := parse(newCmdOpsConfirm(a, func(_ context.Context, o *opsConfirmOptions) error { confirm = o; return nil }), "example.com", "exc_1", "--approve"); err != nil {
		t.Fatal(err)
	}
	if confirm == nil || confirm.Domain != "example.com" || confirm.ID != "exc_1" || !confirm.Approve || confirm.app != a {
		t.Fatalf("ops confirm: %+v", confirm)
	}
	var api *apiOptions
	if err := parse(newCmdAPI(a, func(_ context.Context, o *apiOptions) error { api = o; return nil }), "example.com", "post", "/orders", "--data", "{}", "--api", "https://api.example.com/openapi.json"); err != nil {
		t.Fatal(err)
	}
	if api == nil || api.Method != "POST" || api.Path != "/orders" || api.Data != "{}" || api.API != "https://api.example.com/openapi.json" {
		t.Fatalf("api: %+v", api)
	}
	var si *signInOptions
	if err := parse(newCmdSignIn(a, func(_ context.Context, o *signInOptions) error { si = o; return nil }), "example.com", "--method", "direct", "--scope", "a", "--scope", "b", "--no-open"); err != nil {
		t.Fatal(err)
	}
	if si == nil || si.Method != "direct" || strings.Join(si.Scopes, " ") != "a b" || !si.NoOpen {
		t.Fatalf("signin: %+v", si)
	}
	var chat *chatOptions
	if err := parse(newCmdChat(a, func(_ context.Context, o *chatOptions) error { chat = o; return nil }), "example.com", "--conversation", "cnv_1", "--as", "agent", "--no-stream"); err != nil {
		t.Fatal(err)
	}
	if chat == nil || chat.ConversationID != "cnv_1" || chat.As != "agent" || !chat.NoStream {
		t.Fatalf("chat: %+v", chat)
	}
	called := false
	err := parse(newCmdChat(a, func(context.Context, *chatOptions) error { called = true; return nil }), "example.com", "--as", "robot")
	if !errors.As(err, new(usageError)) || called {
		t.Fatalf("chat --as robot: %v, runF called %v", err, called)
	}
}

// The chat's turn (chatSession.event): it ends at the first state that is
// not "working" after the event of the message sent, in that
// conversation; and without a terminal no text-delta piece is printed,
// only the full message, once.
func TestChatTurn(t *testing.T) {
	var out bytes.Buffer
	a := newApp(newInput(context.Background(), nil), &out, io.Discard, nil)
	if err := a.setup(nil); err != nil {
		t.Fatal(err)
	}
	ch := &chatSession{a: a, domain: "example.com"}
	ch.expectTurn("cnv_1", "msg_1")
	ended := func() bool {
		select {
		case <-ch.turn.ended:
			return true
		default:
			return false
		}
	}
	ctx := context.Background()
	state := func(in string, st conversation.Status) {
		ch.event(ctx, in, conversation.Event{ID: "e", Type: conversation.EventState, Status: st, Responder: conversation.ResponderAgent})
	}
	msg := func(in string, role conversation.Role, id, text string) {
		ch.event(ctx, in, conversation.Event{ID: "e", Type: conversation.EventMessage, Message: &conversation.ReceivedMessage{ID: id, Role: role, Text: text}})
	}
	state("cnv_1", conversation.StatusIdle) // before the message: the turn before
	msg("cnv_2", conversation.RoleUser, "msg_1", "elsewhere")
	state("cnv_2", conversation.StatusIdle)
	if ended() {
		t.Fatal("ended before the message came back")
	}
	msg("cnv_1", conversation.RoleUser, "msg_1", "Hello.")
	state("cnv_1", conversation.StatusWorking)
	ch.event(ctx, "cnv_1", conversation.Event{Type: conversation.EventTextDelta, Delta: &conversation.TextDelta{MessageID: "msg_2", Text: "Thanks, "}})
	msg("cnv_1", conversation.RoleCompany, "msg_2", "Thanks, noted.")
	if ended() {
		t.Fatal("ended while working")
	}
	state("cnv_1", conversation.StatusIdle)
	if !ended() {
		t.Fatal("not ended after idle")
	}
	if s := out.String(); strings.Count(s, "Thanks") != 1 || !strings.Contains(s, "company: Thanks, noted.") {
		t.Fatalf("shown:\n%s", s)
	}
}
