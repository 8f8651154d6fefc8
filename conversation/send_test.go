package conversation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// rewriter is a RoundTripper that lets a test change requests (pre, on
// a clone) and answers (fn).
type rewriter struct {
	base http.RoundTripper
	mu   sync.Mutex
	pre  func(req *http.Request)
	fn   func(req *http.Request, resp *http.Response) *http.Response
}

func (rw *rewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	rw.mu.Lock()
	pre := rw.pre
	rw.mu.Unlock()
	if pre != nil {
		req = req.Clone(req.Context())
		pre(req)
	}
	resp, err := rw.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rw.mu.Lock()
	fn := rw.fn
	rw.mu.Unlock()
	if fn != nil {
		resp = fn(req, resp)
	}
	return resp, nil
}

// withRewriter gives e a Session whose requests pass through a rewriter.
func (e *env) withRewriter(t testing.TB) *rewriter {
	t.Helper()
	return e.withRewriterClock(t, nil)
}

// withRewriterClock is withRewriter with the agent's clock given (nil:
// the fake Company's).
func (e *env) withRewriterClock(t testing.TB, clock poppy.Clock) *rewriter {
	t.Helper()
	rw := &rewriter{base: e.Srv.Client().Transport}
	a := e.NewAgent(&poppy.AgentOptions{HTTPClient: &http.Client{Transport: rw}, Clock: clock})
	c, err := a.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	if e.sess, err = c.Session(ctx, "alice", nil); err != nil {
		t.Fatal(err)
	}
	return rw
}

func replaceBody(resp *http.Response, b []byte) *http.Response {
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	return resp
}

func TestPA_7_1_01_SkipsUnfamiliarProtocols(t *testing.T) {
	// PA-7.1-01: a2a first, then poppy: only the poppy endpoint is used;
	// its trailing "/" gives no "//" (PA-7.2-01).
	e := &env{Env: testenvNew(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"agent": map[string]any{"protocols": []any{
		map[string]any{"type": "a2a", "endpoint": "https://api.example.test/a2a"},
		map[string]any{"type": "poppy", "endpoint": "https://api.example.test/poppy/conversations/"},
	}}}}})}
	e.sess = e.Session("alice")
	c := e.start(t, conversation.Text("Hello."), nil)
	if _, err := c.Send(ctx, conversation.Text("More."), nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Requests() {
		if strings.Contains(r.Path, "a2a") || strings.Contains(r.Path, "//") {
			t.Errorf("request to %s", r.URL)
		}
	}
	if n := len(e.convRequests()); n != 2 {
		t.Errorf("%d conversation requests, want 2", n)
	}
}

func TestPA_7_1_02_NoSupportedProtocol(t *testing.T) {
	e := &env{Env: testenvNew(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"agent": map[string]any{"protocols": []any{
		map[string]any{"type": "a2a", "endpoint": "https://api.example.test/a2a"},
	}}}}})}
	e.sess = e.Session("alice")
	_, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), nil)
	// PA-7.1-02: a typed error naming what is offered, and no request.
	if !errors.Is(err, conversation.ErrNoConversationProtocol) || !strings.Contains(err.Error(), `"a2a"`) {
		t.Fatalf("err = %v", err)
	}
	for _, r := range e.Requests() {
		if r.Host == "api.example.test" {
			t.Errorf("request to %s", r.URL)
		}
	}
}

func TestPA_7_2_01_FiveRequests(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	if _, err := c.Send(ctx, conversation.Text("More."), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Handoff(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	base := "/poppy/conversations"
	want := map[string]string{
		"POST " + base: "application/json",
		"POST " + base + "/" + c.ID() + "/messages": "application/json",
		"GET " + base + "/" + c.ID() + "/events":    "",
		"POST " + base + "/" + c.ID() + "/handoff":  "application/json",
		"POST " + base + "/" + c.ID() + "/close":    "application/json",
	}
	got := map[string]bool{}
	for _, r := range e.convRequests() {
		k := r.Method + " " + r.Path
		ct, ok := want[k]
		if !ok {
			t.Errorf("unexpected request %s", k)
			continue
		}
		got[k] = true
		// PA-7.2-01: JSON bodies with Content-Type application/json.
		if ct != "" && r.Header.Get("Content-Type") != ct {
			t.Errorf("%s: Content-Type %q", k, r.Header.Get("Content-Type"))
		}
		if strings.HasSuffix(k, "/handoff") || strings.HasSuffix(k, "/close") {
			// PA-7.9-01, PA-7.12-01: an empty JSON object.
			if string(r.Body) != "{}" {
				t.Errorf("%s body %q", k, r.Body)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("saw %v, want all of %v", got, want)
	}
}

func TestPA_7_2_02_GeneratedMessageIDs(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)
	seen := map[string]bool{}
	for range 10000 {
		id := conversation.NewMessageID()
		// PA-7.2-02: the alphabet and length; PA-7.2-03: the msg_ prefix.
		if !re.MatchString(id) || !strings.HasPrefix(id, "msg_") || len(id) < 4+22 {
			t.Fatalf("bad ID %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate %q", id)
		}
		seen[id] = true
	}
}

func TestPA_7_2_04_OddCompanyIDs(t *testing.T) {
	// PA-7.2-04: IDs "x", "-_-", 256 characters and no prefixes work.
	for _, stream := range []bool{false, true} {
		e := newEnv(t, poppytest.ConversationOptions{OddIDs: true, Streaming: stream, TextDeltas: true})
		c := e.start(t, conversation.Text("Hello."), nil)
		if c.ID() != "x" {
			t.Fatalf("ID %q", c.ID())
		}
		evs := collect(t, c, nil, isIdle)
		if got := texts(evs); len(got) != 2 {
			t.Fatalf("messages %v", got)
		}
		if _, err := c.Send(ctx, conversation.Text("More."), nil); err != nil {
			t.Fatal(err)
		}
		evs = collect(t, c, nil, isIdle)
		if got := texts(evs); len(got) != 2 {
			t.Fatalf("messages %v", got)
		}
	}
}

func TestPA_7_2_05_BadCompanyID(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	rw := e.withRewriter(t)
	rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/conversations") {
			return replaceBody(resp, []byte(`{"conversation_id":"cnv/1","status":"working","responder":"agent"}`))
		}
		return resp
	}
	_, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), nil)
	// PA-7.2-05
	if !errors.Is(err, conversation.ErrProtocol) {
		t.Fatalf("err = %v", err)
	}
}

func TestPA_7_3_01_StartBodyAndAnswer(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, poppytest.ConversationOptions{ReplyDelay: time.Nanosecond, Agent: func(tn *poppytest.Turn) {
		<-release // the reply waits until the test has seen "working"
		tn.Say("Noted.")
	}})
	c := e.start(t, conversation.Text("The jacket isn't warm enough."), nil)
	defer close(release)
	reqs := e.convRequests()
	b := bodyOf(t, reqs[0])
	// PA-7.3-01: {"message": {...}} and nothing else.
	msg, _ := b["message"].(map[string]any)
	if len(b) != 1 || msg == nil || msg["text"] != "The jacket isn't warm enough." || msg["sender"] != "agent" {
		t.Fatalf("body %s", reqs[0].Body)
	}
	// PA-7.3-02: the 201's conversation_id, status and responder.
	info, _ := e.Srv.Conversations().Get(c.ID())
	if !strings.HasPrefix(c.ID(), "cnv_") || info.ID != c.ID() || c.Status() != conversation.StatusWorking || c.Responder() != conversation.ResponderAgent {
		t.Fatalf("ID %q status %q responder %q", c.ID(), c.Status(), c.Responder())
	}
	res, err := c.Send(ctx, conversation.Text("More."), nil)
	if err != nil {
		t.Fatal(err)
	}
	// PA-7.3-02: a 202's status and responder.
	if res.Status == "" || c.Status() != res.Status || res.Responder != conversation.ResponderAgent {
		t.Fatalf("send result %+v, status %q", res, c.Status())
	}
}

func TestPA_7_3_03_UniqueMessageIDs(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: func(*poppytest.Turn) {}})
	sess2, err := e.Company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	n := 150
	if testing.Short() {
		n = 20
	}
	for _, s := range []*poppy.Session{e.sess, sess2} {
		for range 3 {
			c, err := conversation.Start(ctx, s, conversation.Text("Hello."), nil)
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				if _, err := c.Send(ctx, conversation.Text("Again."), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// PA-7.3-03: no ID twice across conversations and Sessions.
	seen := map[string]bool{}
	for _, r := range e.convRequests() {
		if r.Method != http.MethodPost {
			continue
		}
		id := bodyOf(t, r)["message"].(map[string]any)["id"].(string)
		if seen[id] {
			t.Fatalf("message ID %s sent twice", id)
		}
		seen[id] = true
	}
	if len(seen) != 2*3*(n+1) {
		t.Fatalf("%d IDs", len(seen))
	}
}

func TestPA_7_3_04_RetryAfterLostAnswer(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().LoseResponses(1)
	res, err := c.Send(ctx, conversation.Data("Seats together, please.", map[string]any{"seats": []string{"14A", "14B"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var posts []poppytest.Request
	for _, r := range e.convRequests() {
		if strings.HasSuffix(r.Path, "/messages") {
			posts = append(posts, r)
		}
	}
	// PA-7.3-04: the retry has the same ID and byte-identical JSON.
	if len(posts) != 2 || !bytes.Equal(posts[0].Body, posts[1].Body) || !strings.Contains(string(posts[0].Body), res.MessageID) {
		t.Fatalf("posts %d: %q / %q", len(posts), posts[0].Body, posts[len(posts)-1].Body)
	}
	info, _ := e.Srv.Conversations().Get(c.ID())
	if len(info.Messages) != 2 {
		t.Fatalf("the Company holds %d messages, want 2", len(info.Messages))
	}
}

func TestPA_7_3_05_RetriedStart(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	e.Srv.Conversations().LoseResponses(1)
	c := e.start(t, conversation.Text("Hello."), nil)
	// PA-7.3-05: one conversation, the one the Company started.
	all := e.Srv.Conversations().All()
	if len(all) != 1 || all[0].ID != c.ID() || len(all[0].Messages) != 1 {
		t.Fatalf("conversations %+v, SDK has %s", all, c.ID())
	}
}

func TestPA_7_3_06_MessageIDConflict(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	a := e.start(t, conversation.Message{ID: "msg_fixed", Text: "Hello."}, nil)
	b := e.start(t, conversation.Text("Other."), nil)
	_, err := b.Send(ctx, conversation.Message{ID: "msg_fixed", Text: "Different."}, nil)
	// PA-7.3-06: a typed error, the *poppy.Error behind it.
	var pe *poppy.Error
	if testenv.Code(err) != "message_id_conflict" || !errors.As(err, &pe) || pe.Status != http.StatusConflict {
		t.Fatalf("err = %v", err)
	}
	before := len(e.convRequests())
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(ctx, conversation.Text("Next."), nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.convRequests()[before:] {
		if strings.Contains(string(r.Body), "msg_fixed") {
			t.Fatalf("msg_fixed sent again: %s", r.Body)
		}
	}
}

func TestPA_7_3_07_WaitAndCursor(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), &conversation.StartOptions{Wait: 10 * time.Second})
	reqs := e.convRequests()
	if !strings.HasSuffix(reqs[0].URL, "?wait=10") {
		t.Fatalf("start URL %s", reqs[0].URL)
	}
	// PA-7.3-08: the reply's events come out of Events once, no read needed.
	evs := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	if got := texts(evs); len(got) != 2 {
		t.Fatalf("messages %v", got)
	}
	cur := c.Cursor()
	if _, err := c.Send(ctx, conversation.Text("More."), &conversation.SendOptions{Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	reqs = e.convRequests()
	last := reqs[len(reqs)-1]
	// PA-7.3-07: ?cursor=…&wait=10 on the message POST.
	if last.Method != http.MethodPost || !strings.Contains(last.URL, "cursor="+cur) || !strings.Contains(last.URL, "wait=10") {
		t.Fatalf("message URL %s, cursor %s", last.URL, cur)
	}
	evs = collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	seen := map[string]int{}
	for _, ev := range evs {
		seen[ev.ID]++
	}
	if got := texts(evs); len(got) != 2 || got[0] != "user:More." {
		t.Fatalf("messages %v", got)
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("event %s yielded %d times", id, n)
		}
	}
	// PA-7.3-08: the next read uses the cursor of the reply.
	reqs = e.convRequests()
	if r := reqs[len(reqs)-1]; r.Method == http.MethodGet && !strings.Contains(r.URL, "cursor=") {
		t.Errorf("read without cursor: %s", r.URL)
	}
}

func TestPA_7_4_LocalChecks(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	before := len(e.convRequests())
	// PA-7.4-01: a message without text, data or context is refused, and
	// nothing is sent (the first case); the others are named in their own.
	cases := []struct {
		name string
		msg  conversation.Message
		want error
	}{
		{"PA-7.4-01 empty", conversation.Message{}, conversation.ErrEmptyMessage},
		{"PA-7.4-03 array data", conversation.Message{Data: []int{1}}, conversation.ErrInvalidData},
		{"PA-7.4-03 string data", conversation.Message{Data: "x"}, conversation.ErrInvalidData},
		{"PA-7.4-03 raw array", conversation.Message{Data: json.RawMessage(`[1]`)}, conversation.ErrInvalidData},
		{"PA-7.4-05 locale", conversation.UpdateContext(conversation.Context{Locale: "english"}), conversation.ErrInvalidContext},
		{"PA-7.4-05 locale underscore", conversation.UpdateContext(conversation.Context{Locale: "en_US"}), conversation.ErrInvalidContext},
		{"PA-7.4-06 time zone", conversation.UpdateContext(conversation.Context{TimeZone: "UTC-7"}), conversation.ErrInvalidContext},
		{"PA-7.4-06 Local", conversation.UpdateContext(conversation.Context{TimeZone: "Local"}), conversation.ErrInvalidContext},
		{"bad ID", conversation.Message{ID: "msg 1", Text: "x"}, conversation.ErrInvalidID},
	}
	for _, tc := range cases {
		if _, err := c.Send(ctx, tc.msg, nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := len(e.convRequests()); n != before {
		t.Errorf("%d requests sent for refused messages", n-before)
	}
}

func TestPA_7_4_FieldsAsSent(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	send := func(m conversation.Message) map[string]any {
		t.Helper()
		if _, err := c.Send(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		reqs := e.convRequests()
		return bodyOf(t, reqs[len(reqs)-1])["message"].(map[string]any)
	}
	m := send(conversation.Message{Text: "Seats, please.", Data: map[string]any{"travelers": []any{map[string]any{"name": "Dana"}}},
		Context: &conversation.Context{Locale: "en-US", TimeZone: "America/Los_Angeles", UserAvailable: conversation.Available(true), Extra: map[string]any{"units": "metric"}}})
	ctxm := m["context"].(map[string]any)
	// PA-7.4-05, PA-7.4-06: sent as given; PA-7.4-07: a JSON boolean;
	// PA-7.4-08: extra fields; PA-7.4-03: data an object.
	if ctxm["locale"] != "en-US" || ctxm["time_zone"] != "America/Los_Angeles" || ctxm["user_available"] != true || ctxm["units"] != "metric" {
		t.Fatalf("context %v", ctxm)
	}
	if _, ok := m["data"].(map[string]any); !ok {
		t.Fatalf("data %v", m["data"])
	}
	// PA-7.4-02, PA-7.8-01: id and sender on every message.
	if m["id"] == "" || m["sender"] != "agent" {
		t.Fatalf("message %v", m)
	}
	// PA-7.4-09: no context unless asked.
	if m := send(conversation.Text("Plain.")); m["context"] != nil {
		t.Fatalf("context sent: %v", m)
	}
	// PA-7.4-10: a context-only update, exactly.
	m = send(conversation.UpdateContext(conversation.Context{UserAvailable: conversation.Available(false)}))
	if len(m) != 3 || m["sender"] != "agent" || m["context"].(map[string]any)["user_available"] != false || len(m["context"].(map[string]any)) != 1 {
		t.Fatalf("update %v", m)
	}
	info, _ := e.Srv.Conversations().Get(c.ID())
	if info.Context["locale"] != "en-US" || info.Context["user_available"] != false {
		t.Fatalf("merged context %v", info.Context)
	}
	// PA-7.4-07: user_available false is a boolean too.
	raw := string(e.convRequests()[len(e.convRequests())-1].Body)
	if !strings.Contains(raw, `"user_available":false`) {
		t.Fatalf("body %s", raw)
	}
}

func TestPA_7_4_04_MarkupInText(t *testing.T) {
	var logs bytes.Buffer
	e := newEnv(t, poppytest.ConversationOptions{})
	strict := &conversation.StartOptions{Options: conversation.Options{StrictText: true}}
	for _, text := range []string{`{"a":1}`, `[1, 2]`, ` [{"sku":"m"}] `, `<b>hi</b>`} {
		_, err := conversation.Start(ctx, e.sess, conversation.Text(text), strict)
		// PA-7.4-04: strict mode refuses, and nothing is sent.
		if !errors.Is(err, conversation.ErrMarkupInText) || len(e.convRequests()) != 0 {
			t.Fatalf("%s: err = %v, %d requests", text, err, len(e.convRequests()))
		}
	}
	// The same on a conversation under way, by Send.
	sc, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), strict)
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.convRequests())
	for _, text := range []string{`{"a":1}`, `[1, 2]`, `["a","b"]`} {
		// PA-7.4-04: strict mode refuses, and nothing is sent.
		if _, err := sc.Send(ctx, conversation.Text(text), nil); !errors.Is(err, conversation.ErrMarkupInText) || len(e.convRequests()) != before {
			t.Fatalf("Send %s: err = %v, %d requests", text, err, len(e.convRequests())-before)
		}
	}
	// Prose that only holds brackets is not markup.
	if _, err := sc.Send(ctx, conversation.Text("[1] The order, please (see {above})."), nil); err != nil {
		t.Fatalf("prose refused: %v", err)
	}
	lg := slog.New(slog.NewTextHandler(&logs, nil))
	c, err := conversation.Start(ctx, e.sess, conversation.Text(`<b>hello</b>`), &conversation.StartOptions{Options: conversation.Options{Logger: lg}})
	if err != nil {
		t.Fatal(err)
	}
	// PA-7.4-04: otherwise a warning, without the text.
	if !strings.Contains(logs.String(), "markup") || strings.Contains(logs.String(), "hello") {
		t.Fatalf("log %q", logs.String())
	}
	_ = c
}

func TestPA_7_8_Senders(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	for _, m := range []conversation.Message{conversation.Human("Medium, please."), conversation.Text("Summary."),
		conversation.UpdateContext(conversation.Context{UserAvailable: conversation.Available(true)})} {
		if _, err := c.Send(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DeclineUserRequest(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range e.convRequests() {
		if r.Method == http.MethodPost {
			got = append(got, bodyOf(t, r)["message"].(map[string]any)["sender"].(string))
		}
	}
	// PA-7.8-01: always set; PA-7.8-02: human only for Human(words).
	if strings.Join(got, ",") != "agent,human,agent,agent,agent" {
		t.Fatalf("senders %v", got)
	}
	if (conversation.Message{Text: "x"}).Sender() != conversation.SenderAgent {
		t.Fatal("a literal message is not agent")
	}
}

// PA-7.4-11, PA-OPS4-03: a Company message's operation reaches the caller
// as an *operations.Operation, parsed, only when the agent lists the
// extension; an operation that breaks the extension's rules leaves the
// message whole, with OperationError saying why.
func TestPA_7_4_11_CompanyFieldsAndOperation(t *testing.T) {
	op := json.RawMessage(`{"operation_id":"op_1","state":"proposed","revision":1,"summary":"Exchange the jacket."}`)
	want, err := operations.Parse(op)
	if err != nil {
		t.Fatal(err)
	}
	agent := func(tn *poppytest.Turn) {
		tn.Reply(poppytest.Reply{Text: "Here is the exchange.", Operation: op})
		tn.Reply(poppytest.Reply{Text: "And a broken one.", Operation: json.RawMessage(`{"operation_id":"op_2","state":"proposed","revision":0}`)})
	}
	for _, ops := range []bool{false, true} {
		var e *env
		if ops {
			e = &env{Env: testenvWithExtensions(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Noise: true, Agent: agent}}, map[string]string{"operations": "1"})}
			e.sess = e.Session("alice")
		} else {
			e = newEnv(t, poppytest.ConversationOptions{Noise: true, Agent: agent})
		}
		c := e.start(t, conversation.Text("Exchange it."), nil)
		evs := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
		var m, broken *conversation.ReceivedMessage
		for _, ev := range evs {
			if ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany {
				if ev.Message.Text == "And a broken one." {
					broken = ev.Message
				} else {
					m = ev.Message
				}
			}
			// PA-7.5-04: the unknown "poll" event never reaches the caller.
			if ev.Type == "poll" {
				t.Fatal("unknown event type yielded")
			}
		}
		// PA-7.4-11: context and x_new are ignored; operation only with
		// the extension.
		if m == nil || broken == nil {
			t.Fatal("no Company message")
		}
		if ops != (m.Operation != nil) || (ops && !reflect.DeepEqual(m.Operation, want)) || m.OperationError != nil {
			t.Fatalf("ops=%v operation %+v, %v", ops, m.Operation, m.OperationError)
		}
		if broken.Operation != nil || ops != errors.Is(broken.OperationError, operations.ErrProtocol) {
			t.Fatalf("ops=%v a broken operation: %+v, %v", ops, broken.Operation, broken.OperationError)
		}
	}
}

func TestConversationResource(t *testing.T) {
	// CO-3-12 seen from the SDK: a poppy entry with a resource gets tokens
	// issued for it (PA-4.3-22), and the conversation works.
	e := newEnv(t, poppytest.ConversationOptions{Resource: "https://api.example.test/poppy/conversations"})
	c := e.start(t, conversation.Text("Hello."), nil)
	if got := texts(collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)); len(got) != 2 {
		t.Fatalf("messages %v", got)
	}
	for _, r := range e.convRequests() {
		if tok, _ := e.Srv.Tokens().Get(r.AccessToken); tok.Resource != "https://api.example.test/poppy/conversations" {
			t.Fatalf("token for %q at %s", tok.Resource, r.URL)
		}
	}
}

func TestTokenRefusalKeepsMessage(t *testing.T) {
	// No Session Token could be had: the message never left, is not
	// retried in a loop, and stays in the outbox for later.
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Clock().Advance(2 * time.Hour) // the token expired
	e.Srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Code: "invalid_client", Times: 1})
	before := len(e.Requests(poppytest.EndpointToken))
	_, err := c.Send(ctx, conversation.Text("Kept for later."), nil)
	if !errors.Is(err, poppy.ErrInvalidClient) {
		t.Fatalf("err = %v", err)
	}
	if n := len(e.Requests(poppytest.EndpointToken)) - before; n != 1 {
		t.Fatalf("%d token requests", n)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := e.Srv.Conversations().Get(c.ID())
	if len(info.Messages) != 2 || info.Messages[1].Text != "Kept for later." {
		t.Fatalf("messages %+v", info.Messages)
	}
}

// PA-OPS4-03: a Company Agent proposes an operation in a message (OPS
// 4.3). With Options.Operations the message's Operation is that Client's
// view, observed with the conversation's action, so the Client approves
// it as one of its own; the message marshals to its wire form, operation
// included. A Client of another Company is refused before anything is
// sent.
func TestOperationInMessage(t *testing.T) {
	e := &env{Env: testenvWithExtensions(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		op, err := tn.ProposeOperation("exchange ord_7Hk2", "Exchange the Stormline Jacket (M) for the insulated version, $70 more.", map[string]any{"price_difference": 70})
		if err != nil {
			t.Error(err)
			return
		}
		tn.Reply(poppytest.Reply{Text: "I can exchange it for $70 more.", Operation: op})
	}}}, map[string]string{"operations": "1"})}
	e.sess = e.Session("alice")
	var asked []*operations.ApprovalRequest
	oc, err := operations.New(e.sess, &operations.Options{Approver: operations.ApproverFunc(func(_ context.Context, r *operations.ApprovalRequest) (operations.Decision, error) {
		asked = append(asked, r)
		return operations.Decline, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	// A Client of another Company's Session: refused, nothing sent.
	other := &env{Env: testenvWithExtensions(t, nil, map[string]string{"operations": "1"})}
	otherClient, err := operations.New(other.Session("alice"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conversation.Start(ctx, e.sess, conversation.Text("Exchange it."), &conversation.StartOptions{Options: conversation.Options{Operations: otherClient}}); err == nil || len(e.convRequests()) != 0 {
		t.Fatalf("a Client of another Company: %v, %d requests", err, len(e.convRequests()))
	}
	c := e.start(t, conversation.Text("Exchange it."), &conversation.StartOptions{Options: conversation.Options{Operations: oc}})
	var m *conversation.ReceivedMessage
	for _, ev := range collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil) {
		if ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany {
			m = ev.Message
		}
	}
	if m == nil || m.Operation == nil || m.OperationError != nil || m.Operation.State != operations.StateProposed {
		t.Fatalf("message %+v", m)
	}
	// The Client's own operation, proposed in the conversation.
	if _, err := oc.Approve(ctx, m.Operation); !errors.Is(err, operations.ErrDeclined) || len(asked) != 1 ||
		asked[0].OperationID != m.Operation.ID || asked[0].Action != operations.ConversationAction() {
		t.Fatalf("Approve: %v, asked %+v", err, asked)
	}
	b, _ := json.Marshal(m)
	var wire struct {
		ID        string `json:"id"`
		Operation struct {
			OperationID string `json:"operation_id"`
			State       string `json:"state"`
		} `json:"operation"`
	}
	if err := json.Unmarshal(b, &wire); err != nil || wire.ID != m.ID || wire.Operation.OperationID != m.Operation.ID || wire.Operation.State != "proposed" {
		t.Fatalf("message %s", b)
	}
}
