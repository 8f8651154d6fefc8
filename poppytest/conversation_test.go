package poppytest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// convAgent is a raw agent with a Session for one User.
type convAgent struct {
	*rawAgent
	user string
	tok  string
	sess string
}

func newConvAgent(t *testing.T, srv *poppytest.Server, a *rawAgent, user string) *convAgent {
	t.Helper()
	r := a.start(user)
	return &convAgent{rawAgent: a, user: user, tok: r.str("access_token"), sess: r.str("session_id")}
}

// req sends a conversation request with the agent's token and a valid
// proof; hdr are name, value pairs.
func (c *convAgent) req(method, path, body string, hdr ...string) *response {
	c.t.Helper()
	u := c.srv.EndpointURL(poppytest.EndpointAPI) + "/poppy/conversations" + path
	htu, _, _ := strings.Cut(u, "?")
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, u, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "DPoP "+c.tok)
	req.Header.Set("DPoP", c.proof(method, htu, c.userKey(c.user), withToken(c.tok)))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(c.t, c.srv.Client(), req)
}

func msgBody(id, text string) string {
	b, _ := json.Marshal(map[string]any{"message": map[string]any{"id": id, "sender": "agent", "text": text}})
	return string(b)
}

// startConv starts a conversation and returns its ID.
func (c *convAgent) startConv(text string) string {
	c.t.Helper()
	r := c.req("POST", "", msgBody(randMsgID(), text))
	if r.Status != http.StatusCreated {
		c.t.Fatalf("start: %d %s", r.Status, r.Raw)
	}
	return r.str("conversation_id")
}

func randMsgID() string { return "msg_" + randID() }

// events reads every event of conv (no wait), following has_more.
func (c *convAgent) events(conv string) []map[string]any {
	c.t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		q := ""
		if cursor != "" {
			q = "?cursor=" + cursor
		}
		r := c.req("GET", "/"+conv+"/events"+q, "")
		if r.Status != http.StatusOK {
			c.t.Fatalf("read: %d %s", r.Status, r.Raw)
		}
		for _, ev := range r.Body["events"].([]any) {
			out = append(out, ev.(map[string]any))
		}
		if cur, ok := r.Body["cursor"].(string); ok {
			cursor = cur
		}
		if r.Body["has_more"] != true {
			return out
		}
	}
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// checkEvents is the validator of CO-7.2-05, CO-7.5-01, CO-7.4-02,
// CO-7.4-03, CO-7.4-06 and CO-7.7-05 over events.
func checkEvents(t *testing.T, evs []map[string]any) {
	t.Helper()
	for _, ev := range evs {
		id, _ := ev["id"].(string)
		typ, _ := ev["type"].(string)
		ca, _ := ev["created_at"].(string)
		if !idRE.MatchString(id) || typ == "" {
			t.Errorf("CO-7.2-05/CO-7.5-01: event %v", ev)
		}
		if _, err := time.Parse(time.RFC3339, ca); err != nil {
			t.Errorf("CO-7.5-01: created_at %q", ca)
		}
		if typ != "message" {
			continue
		}
		m := ev["message"].(map[string]any)
		role, _ := m["role"].(string)
		if role != "user" && role != "company" {
			t.Errorf("CO-7.5-01: role %q", role)
		}
		if role != "company" {
			continue
		}
		if s := m["sender"]; s != "agent" && s != "human" {
			t.Errorf("CO-7.7-05: sender %v", s)
		}
		text, _ := m["text"].(string)
		if text == "" && m["data"] == nil {
			t.Errorf("CO-7.4-02: Company message without text or data")
		}
		if _, ok := m["context"]; ok {
			t.Errorf("CO-7.4-06: Company message with context")
		}
		if strings.HasPrefix(strings.TrimSpace(text), "{") || strings.Contains(text, "<") {
			t.Errorf("CO-7.4-03: markup in %q", text)
		}
		if mid, _ := m["id"].(string); !idRE.MatchString(mid) {
			t.Errorf("CO-7.2-05: message id %q", mid)
		}
	}
}

func TestCO_7_2_Ownership(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Accounts: []poppytest.Account{
		{ID: "acct_1", Credentials: map[string]string{"email": "a@example.test", "password": "p"}},
		{ID: "acct_2", Credentials: map[string]string{"email": "b@example.test", "password": "q"}},
	}}})
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	other := newConvAgent(t, srv, newAgent(t, srv, "other.test"), "usr_alice")
	bob := newConvAgent(t, srv, a.rawAgent, "usr_bob")
	conv := a.startConv("Hello.")
	unknown := a.req("GET", "/cnv_nope/events", "")
	// CO-7.2-01: another client_id; CO-7.2-02: another User.
	r1 := other.req("GET", "/"+conv+"/events", "")
	r2 := bob.req("GET", "/"+conv+"/events", "")
	for _, r := range []*response{unknown, r1, r2} {
		if r.Status != http.StatusNotFound || r.str("error") != "conversation_not_found" {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
	}
	// CO-7.2-04: another Session of the same User continues it after the
	// first ended.
	srv.Sessions().End(a.sess)
	a2 := newConvAgent(t, srv, a.rawAgent, "usr_alice")
	if r := a2.req("GET", "/"+conv+"/events", ""); r.Status != http.StatusOK {
		t.Fatalf("read from a new Session: %d %s", r.Status, r.Raw)
	}
	if r := a2.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "Again.")); r.Status != http.StatusAccepted {
		t.Fatalf("post from a new Session: %d %s", r.Status, r.Raw)
	}
	// CO-7.2-03: once signed in to acct_1, the conversation is the
	// account's; a token of acct_2 gets 404.
	tok1, err := srv.Sessions().SignIn(a2.sess, "acct_1", "poppy:read")
	if err != nil {
		t.Fatal(err)
	}
	a2.tok = tok1
	if r := a2.req("GET", "/"+conv+"/events", ""); r.Status != http.StatusOK {
		t.Fatalf("signed-in read: %d", r.Status)
	}
	a3 := newConvAgent(t, srv, a.rawAgent, "usr_alice")
	tok2, err := srv.Sessions().SignIn(a3.sess, "acct_2", "poppy:read")
	if err != nil {
		t.Fatal(err)
	}
	a3.tok = tok2
	r3 := a3.req("GET", "/"+conv+"/events", "")
	if r3.Status != http.StatusNotFound || r3.str("error") != "conversation_not_found" {
		t.Fatalf("other account: %d %s", r3.Status, r3.Raw)
	}
	// CO-7.13-02: the bodies are byte-identical.
	for _, r := range []*response{r1, r2, r3} {
		if string(r.Raw) != string(unknown.Raw) {
			t.Fatalf("CO-7.13-02: %s vs %s", r.Raw, unknown.Raw)
		}
	}
	// CO-7.11-06: the same User, signed out, gets sign_in_required.
	srv.Sessions().SignOut(a2.sess)
	if r := a2.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "Still there?")); r.Status != http.StatusForbidden || r.str("error") != "sign_in_required" {
		t.Fatalf("signed out: %d %s", r.Status, r.Raw)
	}
}

func TestCO_7_2_IDs(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	conv := a.startConv("Hello.")
	// CO-7.2-06: prefixes; CO-7.2-05: the alphabet (checkEvents).
	if !strings.HasPrefix(conv, "cnv_") || !idRE.MatchString(conv) {
		t.Fatalf("conversation ID %q", conv)
	}
	// CO-7.2-07: message IDs of any format.
	for _, id := range []string{"a", strings.Repeat("Z", 256)} {
		if r := a.req("POST", "/"+conv+"/messages", msgBody(id, "Hi.")); r.Status != http.StatusAccepted {
			t.Fatalf("id %q: %d %s", id, r.Status, r.Raw)
		}
	}
	// CO-7.2-08, A-30: a bad ID is refused.
	if r := a.req("POST", "/"+conv+"/messages", msgBody("msg 1", "Hi.")); r.Status != http.StatusBadRequest || r.str("error") != "invalid_request" {
		t.Fatalf("bad id: %d %s", r.Status, r.Raw)
	}
	srv.TakeViolations()
	evs := a.events(conv)
	checkEvents(t, evs)
	for _, ev := range evs {
		if !strings.HasPrefix(ev["id"].(string), "evt_") {
			t.Fatalf("CO-7.2-06: event ID %v", ev["id"])
		}
	}
	// With OddIDs, IDs still follow the rules.
	odd := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{OddIDs: true}})
	b := newConvAgent(t, odd, newAgent(t, odd, "agent.test"), "usr_alice")
	c2 := b.startConv("Hello.")
	if c2 != "x" {
		t.Fatalf("odd ID %q", c2)
	}
	checkEvents(t, b.events(c2))
}

func TestCO_7_3_Messages(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	first := msgBody("msg_first", "Hello.")
	r := a.req("POST", "", first)
	// CO-7.3-01: 201 with conversation_id, status, responder.
	if r.Status != http.StatusCreated || r.str("conversation_id") == "" || r.str("status") == "" || r.str("responder") == "" {
		t.Fatalf("start %d %s", r.Status, r.Raw)
	}
	conv := r.str("conversation_id")
	// CO-7.3-03: a retried first message returns the same conversation.
	again := a.req("POST", "", first)
	if again.Status != http.StatusCreated || string(again.Raw) != string(r.Raw) || len(srv.Conversations().All()) != 1 {
		t.Fatalf("retried start %d %s", again.Status, again.Raw)
	}
	m := msgBody("msg_second", "More.")
	r = a.req("POST", "/"+conv+"/messages", m)
	if r.Status != http.StatusAccepted || r.str("status") == "" || r.str("responder") == "" {
		t.Fatalf("message %d %s", r.Status, r.Raw)
	}
	n := len(a.events(conv))
	// CO-7.3-02: same ID and content: the original answer, nothing added.
	r2 := a.req("POST", "/"+conv+"/messages", m)
	if r2.Status != r.Status || string(r2.Raw) != string(r.Raw) || len(a.events(conv)) != n {
		t.Fatalf("retry %d %s", r2.Status, r2.Raw)
	}
	// CO-7.3-04: same ID, other content, even in another conversation.
	other := a.startConv("Other.")
	r3 := a.req("POST", "/"+other+"/messages", msgBody("msg_second", "Changed."))
	if r3.Status != http.StatusConflict || r3.str("error") != "message_id_conflict" {
		t.Fatalf("conflict %d %s", r3.Status, r3.Raw)
	}
	wantRules(t, srv)
	// Sending other content again under the refused ID is the client's
	// fault, and recorded.
	a.req("POST", "/"+other+"/messages", msgBody("msg_second", "Changed again."))
	wantRules(t, srv, pa("7.3-06"))
	// CO-7.3-05: wait turns the answer into a read, status still 202.
	r4 := a.req("POST", "/"+conv+"/messages?wait=2", msgBody(randMsgID(), "Waiting."))
	if r4.Status != http.StatusAccepted {
		t.Fatalf("wait %d", r4.Status)
	}
	for _, k := range []string{"events", "cursor", "has_more", "status", "responder"} {
		if _, ok := r4.Body[k]; !ok {
			t.Fatalf("wait answer lacks %s: %s", k, r4.Raw)
		}
	}
}

func TestCO_7_4_MessageFields(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Noise: false}})
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	conv := a.startConv("Hello.")
	// CO-7.4-01: none of text, data, context.
	r := a.req("POST", "/"+conv+"/messages", `{"message":{"id":"msg_1","sender":"agent"}}`)
	if r.Status != http.StatusBadRequest || r.str("error") != "invalid_request" {
		t.Fatalf("empty: %d %s", r.Status, r.Raw)
	}
	srv.TakeViolations()
	// CO-7.4-05: context merges; CO-7.4-04: other fields accepted.
	for _, ctx := range []string{`{"locale":"en-US"}`, `{"user_available":false,"units":"metric"}`} {
		r := a.req("POST", "/"+conv+"/messages", `{"message":{"id":"`+randMsgID()+`","sender":"agent","context":`+ctx+`}}`)
		if r.Status != http.StatusAccepted {
			t.Fatalf("context %s: %d %s", ctx, r.Status, r.Raw)
		}
	}
	info, _ := srv.Conversations().Get(conv)
	if info.Context["locale"] != "en-US" || info.Context["user_available"] != false || info.Context["units"] != "metric" {
		t.Fatalf("context %v", info.Context)
	}
	checkEvents(t, a.events(conv)) // CO-7.4-02, CO-7.4-03, CO-7.4-06
}

func TestCO_7_5_Reads(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{
		Agent: func(*poppytest.Turn) {}, PageSize: 2, MaxWait: 200 * time.Millisecond}})
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	conv := a.startConv("Hello.")
	e1 := srv.Conversations().Append(conv, map[string]any{"type": "user_requested", "reason": "one"})
	e2 := srv.Conversations().Append(conv, map[string]any{"type": "user_requested", "reason": "two"})
	all := a.events(conv)
	// CO-7.5-02: no cursor → from the beginning; a cursor → after it.
	if len(all) != 4 {
		t.Fatalf("%d events", len(all))
	}
	r := a.req("GET", "/"+conv+"/events?cursor="+e1, "")
	evs := r.Body["events"].([]any)
	if len(evs) != 1 || evs[0].(map[string]any)["id"] != e2 {
		t.Fatalf("after %s: %s", e1, r.Raw)
	}
	// CO-7.5-06, CO-7.5-07: an empty read has all four keys; its cursor is
	// the request's.
	r = a.req("GET", "/"+conv+"/events?cursor="+e2, "")
	for _, k := range []string{"cursor", "has_more", "status", "responder"} {
		if _, ok := r.Body[k]; !ok {
			t.Fatalf("empty read lacks %s", k)
		}
	}
	if r.Body["cursor"] != e2 || len(r.Body["events"].([]any)) != 0 {
		t.Fatalf("empty read %s", r.Raw)
	}
	// CO-7.5-07: a page's cursor is its last event; has_more pages.
	r = a.req("GET", "/"+conv+"/events", "")
	pg := r.Body["events"].([]any)
	if len(pg) != 2 || r.Body["has_more"] != true || r.Body["cursor"] != pg[1].(map[string]any)["id"] {
		t.Fatalf("page %s", r.Raw)
	}
	// CO-7.5-03, CO-7.5-05: a held read times out (capped by MaxWait) with
	// an empty list; CO-7.5-04: without wait it returns at once.
	r = a.req("GET", "/"+conv+"/events?cursor="+e2+"&wait=30", "")
	if r.Status != http.StatusOK || len(r.Body["events"].([]any)) != 0 {
		t.Fatalf("held read %s", r.Raw)
	}
	// A held read returns when an event comes.
	done := make(chan *response)
	go func() { done <- a.req("GET", "/"+conv+"/events?cursor="+e2+"&wait=30", "") }()
	time.Sleep(20 * time.Millisecond)
	e3 := srv.Conversations().Append(conv, map[string]any{"type": "user_requested", "reason": "three"})
	r = <-done
	if evs := r.Body["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["id"] != e3 {
		t.Fatalf("woken read %s", r.Raw)
	}
	// CO-7.5-08: a purged cursor → 410 cursor_expired; CO-7.13-03: a
	// cursor of another conversation → 400 invalid_cursor.
	srv.Conversations().PurgeBefore(conv, e2)
	if r := a.req("GET", "/"+conv+"/events?cursor="+e1, ""); r.Status != http.StatusGone || r.str("error") != "cursor_expired" {
		t.Fatalf("purged: %d %s", r.Status, r.Raw)
	}
	otherConv := a.startConv("Other.")
	otherEv := srv.Conversations().Append(otherConv, map[string]any{"type": "user_requested", "reason": "x"})
	if r := a.req("GET", "/"+conv+"/events?cursor="+otherEv, ""); r.Status != http.StatusBadRequest || r.str("error") != "invalid_cursor" {
		t.Fatalf("foreign cursor: %d %s", r.Status, r.Raw)
	}
	// CO-7.13-01: JSON error bodies.
	if r := a.req("GET", "/"+conv+"/events?cursor=evt_nope", ""); !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("error Content-Type %q", r.Header.Get("Content-Type"))
	}
	checkEvents(t, a.events(conv))
}

// sseFrames parses a stream body into (id, event, data) frames.
func sseFrames(raw []byte) [][3]string {
	var out [][3]string
	var cur [3]string
	var data []string
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != nil {
				cur[2] = strings.Join(data, "\n")
				out = append(out, cur)
			}
			cur, data = [3]string{}, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur[0] = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur[1] = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		}
	}
	return out
}

func TestCO_7_6_Streams(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Streaming: true, TextDeltas: true}})
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	conv := a.startConv("Hello.")
	srv.Conversations().Close(conv)
	r := a.req("GET", "/"+conv+"/events", "", "Accept", "text/event-stream")
	// CO-7.6-01: an SSE stream.
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream %d %q", r.Status, r.Header.Get("Content-Type"))
	}
	frames := sseFrames(r.Raw)
	polled := a.events(conv)
	// CO-7.6-02: the SSE id is the event ID and data the same JSON;
	// CO-7.6-05: text-delta pieces have no id.
	var streamed []map[string]any
	deltas := 0
	for _, f := range frames {
		if f[1] == "text-delta" {
			deltas++
			var d map[string]any
			if f[0] != "" || json.Unmarshal([]byte(f[2]), &d) != nil || d["message_id"] == nil || d["text"] == nil {
				t.Fatalf("delta frame %q", f)
			}
			continue
		}
		var ev map[string]any
		json.Unmarshal([]byte(f[2]), &ev)
		if ev["id"] != f[0] {
			t.Fatalf("frame id %q, event %v", f[0], ev["id"])
		}
		streamed = append(streamed, ev)
	}
	sj, _ := json.Marshal(streamed)
	pj, _ := json.Marshal(polled)
	if deltas != 3 || string(sj) != string(pj) {
		t.Fatalf("deltas %d\nstreamed %s\npolled   %s", deltas, sj, pj)
	}
	// CO-7.6-04: a reconnect resumes after Last-Event-ID.
	r = a.req("GET", "/"+conv+"/events", "", "Accept", "text/event-stream", "Last-Event-ID", polled[1]["id"].(string))
	if f := sseFrames(r.Raw); len(f) == 0 || (f[0][0] != polled[2]["id"] && f[0][1] != "text-delta") {
		t.Fatalf("resumed stream %q", r.Raw)
	}
	// CO-7.6-03: the Company closes streams, here after 2 events.
	srv2 := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Streaming: true, CloseStreamAfter: 2}})
	b := newConvAgent(t, srv2, newAgent(t, srv2, "agent.test"), "usr_alice")
	conv2 := b.startConv("Hello.")
	if f := sseFrames(b.req("GET", "/"+conv2+"/events", "", "Accept", "text/event-stream").Raw); len(f) != 2 {
		t.Fatalf("frames %q", f)
	}
	// A Company without Streaming answers JSON.
	srv3 := poppytest.NewServer(t, nil)
	c := newConvAgent(t, srv3, newAgent(t, srv3, "agent.test"), "usr_alice")
	conv3 := c.startConv("Hello.")
	if r := c.req("GET", "/"+conv3+"/events", "", "Accept", "text/event-stream"); !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("no streaming: %q", r.Header.Get("Content-Type"))
	}
}

func lastState(evs []map[string]any) (string, string) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i]["type"] == "state" {
			return evs[i]["status"].(string), evs[i]["responder"].(string)
		}
	}
	return "", ""
}

func states(evs []map[string]any) []string {
	var out []string
	for _, ev := range evs {
		if ev["type"] == "state" {
			out = append(out, ev["status"].(string)+"/"+ev["responder"].(string))
		}
	}
	return out
}

func TestCO_7_7_And_7_9_Handoff(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	conv := a.startConv("Hello.")
	r := a.req("POST", "/"+conv+"/handoff", "{}")
	// CO-7.9-01: 202 queued; CO-7.7-03: responder stays agent.
	if r.Status != http.StatusAccepted || r.str("status") != "queued" || r.str("responder") != "agent" {
		t.Fatalf("handoff %d %s", r.Status, r.Raw)
	}
	// CO-7.9-02: messages while queued.
	if r := a.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "Details.")); r.Status != http.StatusAccepted {
		t.Fatalf("queued message %d", r.Status)
	}
	rd := a.req("GET", "/"+conv+"/events", "")
	if rd.str("status") != "queued" || rd.str("responder") != "agent" {
		t.Fatalf("read while queued %s", rd.Raw)
	}
	srv.Conversations().JoinHuman(conv)
	if err := a.req("POST", "/"+conv+"/close", "{}"); err.Status != http.StatusOK || err.str("status") != "closed" || err.str("responder") != "human" {
		// CO-7.12-02, CO-7.7-04: 200, closed, whoever handled it last.
		t.Fatalf("close %d %s", err.Status, err.Raw)
	}
	evs := a.events(conv)
	// CO-7.7-02: a state event for every change; CO-7.12-01: ends closed.
	if got := strings.Join(states(evs), ","); got != "idle/agent,queued/agent,idle/human,closed/human" {
		t.Fatalf("states %s", got)
	}
	// CO-7.7-01: every answer has status and responder (checked above).
	// CO-7.9-03: closing cancels a pending handoff.
	conv2 := a.startConv("Hello again.")
	a.req("POST", "/"+conv2+"/handoff", "{}")
	a.req("POST", "/"+conv2+"/close", "{}")
	srv.Conversations().JoinHuman(conv2)
	for _, s := range states(a.events(conv2)) {
		if strings.HasSuffix(s, "/human") {
			t.Fatalf("a person joined a closed conversation: %v", states(a.events(conv2)))
		}
	}
	// CO-7.9-04: nobody available → idle/agent and a message saying why.
	conv3 := a.startConv("Third.")
	a.req("POST", "/"+conv3+"/handoff", "{}")
	srv.Conversations().NoHumanAvailable(conv3)
	evs = a.events(conv3)
	if st, resp := lastState(evs); st != "idle" || resp != "agent" {
		t.Fatalf("state %s/%s", st, resp)
	}
	last := evs[len(evs)-1]
	if last["type"] != "message" || last["message"].(map[string]any)["sender"] != "agent" {
		t.Fatalf("last event %v", last)
	}
	checkEvents(t, evs)
	// CO-7.12-03: a closed conversation refuses messages and handoffs, and
	// stays readable.
	if r := a.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "Hi?")); r.Status != http.StatusConflict || r.str("error") != "conversation_closed" {
		t.Fatalf("message after close %d %s", r.Status, r.Raw)
	}
	if r := a.req("POST", "/"+conv+"/handoff", "{}"); r.Status != http.StatusConflict || r.str("error") != "conversation_closed" {
		t.Fatalf("handoff after close %d %s", r.Status, r.Raw)
	}
	if r := a.req("GET", "/"+conv+"/events", ""); r.Status != http.StatusOK {
		t.Fatalf("read after close %d", r.Status)
	}
}

func TestCODirectConversations(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	bob := newConvAgent(t, srv, a.rawAgent, "usr_bob")
	parent := a.startConv("Hello.")
	direct := func(c *convAgent, p string) *response {
		b, _ := json.Marshal(map[string]any{"parent_conversation_id": p, "message": map[string]any{"id": randMsgID(), "sender": "human", "text": "Hi, it's me."}})
		return c.req("POST", "", string(b))
	}
	// CO-7.10-05: a user_requested event with its short reason; the fake
	// never starts a Direct.
	const reason = "A specialist needs the customer."
	srv.Conversations().RequestUser(parent, reason)
	if evs := a.events(parent); evs[len(evs)-1]["type"] != "user_requested" || evs[len(evs)-1]["reason"] != reason {
		t.Fatalf("after RequestUser, the last event is %v", evs[len(evs)-1])
	}
	if len(srv.Conversations().All()) != 1 {
		t.Fatal("the fake started a conversation")
	}
	// CO-7.10-02: another owner's parent → conversation_not_found.
	if r := direct(bob, parent); r.Status != http.StatusNotFound {
		t.Fatalf("foreign parent %d", r.Status)
	}
	d := direct(a, parent)
	if d.Status != http.StatusCreated {
		t.Fatalf("direct %d %s", d.Status, d.Raw)
	}
	did := d.str("conversation_id")
	// CO-7.10-03, A-28: a Direct as parent → conversation_not_found.
	if r := direct(a, did); r.Status != http.StatusNotFound || r.str("error") != "conversation_not_found" {
		t.Fatalf("direct of a direct %d %s", r.Status, r.Raw)
	}
	// CO-7.10-04: one open Direct at a time, named.
	if r := direct(a, parent); r.Status != http.StatusConflict || r.str("error") != "direct_conversation_open" || r.str("conversation_id") != did {
		t.Fatalf("second direct %d %s", r.Status, r.Raw)
	}
	// CO-7.10-06: direct_opened in the parent.
	evs := a.events(parent)
	if last := evs[len(evs)-1]; last["type"] != "direct_opened" || last["conversation_id"] != did {
		t.Fatalf("parent events %v", evs)
	}
	// CO-7.10-07: the parent refuses messages and handoffs, stays readable.
	for _, p := range []string{"/messages", "/handoff"} {
		body := "{}"
		if p == "/messages" {
			body = msgBody(randMsgID(), "Meanwhile.")
		}
		if r := a.req("POST", "/"+parent+p, body); r.Status != http.StatusConflict || r.str("error") != "direct_conversation_open" || r.str("conversation_id") != did {
			t.Fatalf("%s to parent %d %s", p, r.Status, r.Raw)
		}
	}
	// CO-7.10-08: closing the Direct adds direct_closed; messages again.
	a.req("POST", "/"+did+"/close", "{}")
	evs = a.events(parent)
	if last := evs[len(evs)-1]; last["type"] != "direct_closed" || last["conversation_id"] != did {
		t.Fatalf("parent events %v", evs)
	}
	if r := a.req("POST", "/"+parent+"/messages", msgBody(randMsgID(), "Back.")); r.Status != http.StatusAccepted {
		t.Fatalf("after direct_closed %d", r.Status)
	}
	// CO-7.10-09: closing the parent closes its open Direct.
	d2 := direct(a, parent).str("conversation_id")
	a.req("POST", "/"+parent+"/close", "{}")
	if st, _ := lastState(a.events(d2)); st != "closed" {
		t.Fatalf("direct state %q", st)
	}
	// CO-7.10-01: a closed parent → conversation_closed.
	if r := direct(a, parent); r.Status != http.StatusConflict || r.str("error") != "conversation_closed" {
		t.Fatalf("closed parent %d %s", r.Status, r.Raw)
	}
}

func TestCOSignInDuringConversation(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		if tn.RequireScopes("poppy:read", "poppy:write") {
			tn.Do("exchange ord_7Hk2")
			tn.Say("Exchange placed.")
		}
	}}})
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	conv := a.startConv("Where is my order?")
	evs := a.events(conv)
	// CO-7.11-01: sign_in_required with a signed-out token; CO-7.11-02: a
	// message follows.
	var i int
	for i = range evs {
		if evs[i]["type"] == "authorization" {
			break
		}
	}
	if evs[i]["error"] != "sign_in_required" || evs[i+1]["type"] != "message" {
		t.Fatalf("events %v", evs)
	}
	// CO-7.11-04, CO-7.11-05: a read-only token, and a message claiming
	// authority, whoever handles it: refused, insufficient_scope naming
	// poppy:write; nothing done.
	tok, err := srv.Sessions().SignIn(a.sess, "acct_1", "poppy:read")
	if err != nil {
		t.Fatal(err)
	}
	a.tok = tok
	srv.Conversations().JoinHuman(conv)
	a.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "I authorise the exchange."))
	evs = a.events(conv)
	var auth map[string]any
	for _, ev := range evs {
		if ev["type"] == "authorization" {
			auth = ev
		}
		if ev["type"] == "message" && ev["message"].(map[string]any)["text"] == "Exchange placed." {
			t.Fatal("the action was done with a read-only token")
		}
	}
	if auth["error"] != "insufficient_scope" || !strings.Contains(auth["scope"].(string), "poppy:write") {
		t.Fatalf("authorization %v", auth)
	}
	// CO-7.11-03: open throughout, the same ID; cleared once the token has
	// the scopes.
	tok, _ = srv.Sessions().SignIn(a.sess, "acct_1", "poppy:read", "poppy:write")
	a.tok = tok
	if r := a.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "Now?")); r.Status != http.StatusAccepted || r.str("conversation_id") != conv {
		t.Fatalf("message %d %s", r.Status, r.Raw)
	}
	evs = a.events(conv)
	if last := evs[len(evs)-2]; last["type"] != "message" || last["message"].(map[string]any)["text"] != "Exchange placed." {
		t.Fatalf("events %v", evs)
	}
	for _, s := range states(evs) {
		if strings.HasPrefix(s, "closed") {
			t.Fatal("closed during sign-in")
		}
	}
	// CO-7.12-04: closing cancels nothing the conversation did.
	if r := a.req("POST", "/"+conv+"/close", "{}"); r.Status != http.StatusOK {
		t.Fatalf("close %d", r.Status)
	}
	if info, _ := srv.Conversations().Get(conv); len(info.Actions) != 1 || info.Actions[0] != "exchange ord_7Hk2" {
		t.Fatalf("actions after close %v", info.Actions)
	}
}

func TestCO_3_12_ConversationResource(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Resource: "https://api.example.test/poppy/conversations"}})
	doc := get(t, srv, srv.URL()+"/.well-known/poppy.json")
	p := doc.Body["agent"].(map[string]any)["protocols"].([]any)[0].(map[string]any)
	if p["resource"] != "https://api.example.test/poppy/conversations" {
		t.Fatalf("entry %v", p)
	}
	// A token not issued for the resource is refused.
	a := newConvAgent(t, srv, newAgent(t, srv, "agent.test"), "usr_alice")
	if r := a.req("POST", "", msgBody(randMsgID(), "Hi.")); r.Status != http.StatusUnauthorized || !strings.Contains(r.wwwAuth(), "invalid_token") {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	srv.TakeViolations()
}
