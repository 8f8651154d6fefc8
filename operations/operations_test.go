package operations_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// The happy path: propose, ask the User, confirm, succeed.
func TestJacketExchange(t *testing.T) {
	var finals []*operations.Operation
	var mu sync.Mutex
	e := newEnv(t, nil, &operations.Options{OnFinal: func(op *operations.Operation) {
		mu.Lock()
		finals = append(finals, op)
		mu.Unlock()
	}})
	op := e.propose("itm_4Qa")
	// PA-OPS4-01: a 202 gives a proposed operation; nothing happened yet.
	if op.State != operations.StateProposed || op.Revision != 1 || !strings.HasPrefix(op.ID, "exc_") {
		t.Fatalf("proposed: %+v", op)
	}
	if n := len(e.Srv.Operations().Performed()); n != 0 {
		t.Fatalf("performed before confirm: %d", n)
	}
	// PA-OPS3-02: NeedsApproval shows expires_at.
	if op.ExpiresAt.IsZero() {
		t.Error("no expires_at")
	}
	done, err := e.c.Handle(ctx, op, nil)
	if err != nil {
		t.Fatal(err)
	}
	// PA-OPS3-04
	if done.State != operations.StateSucceeded || done.Result == nil || !strings.Contains(done.Result.Summary, "Exchange placed") {
		t.Fatalf("final: %+v", done)
	}
	asked := e.ap.asked()
	if len(asked) != 1 {
		t.Fatalf("Approver asked %d times", len(asked))
	}
	// PA-OPS5-02: the Company's name and the summary byte for byte.
	if asked[0].Company != "Example Company" || asked[0].Summary != op.Summary || asked[0].Revision != 1 || !asked[0].ExpiresAt.Equal(op.ExpiresAt) || asked[0].URL != op.URL {
		t.Errorf("approval request: %+v", asked[0])
	}
	// PA-OPS5-13, PA-OPS5-12
	cs := e.confirms()
	if len(cs) != 1 || cs[0].Path != "/poppy/operations/"+op.ID+"/confirm" {
		t.Fatalf("confirms: %v", cs)
	}
	if b := confirmBody(t, cs[0]); b["revision"] != float64(1) || b["approved_by"] != "user" || len(b) != 2 {
		t.Errorf("confirm body %v", b)
	}
	// PA-OPS6-05: the app gets result.summary verbatim.
	fi := info(t, e.Srv, op.ID)
	var wire struct {
		Result struct {
			Summary string
			Data    json.RawMessage
		} `json:"result"`
	}
	json.Unmarshal(fi.JSON, &wire)
	mu.Lock()
	defer mu.Unlock()
	if len(finals) != 1 || finals[0].Result.Summary != wire.Result.Summary {
		t.Errorf("OnFinal got %v, the Company says %q", finals, wire.Result.Summary)
	}
	// PA-OPS3-04: the result is reported whole, its data (the return's
	// reference) as well as its summary, to the caller and to OnFinal.
	if !strings.Contains(string(wire.Result.Data), `"return_id":"rtn_`) {
		t.Fatalf("the fake's result has no data: %s", fi.JSON)
	}
	if string(done.Result.Data) != string(wire.Result.Data) {
		t.Errorf("PA-OPS3-04: result data %q, the Company sent %s", done.Result.Data, wire.Result.Data)
	}
	if len(finals) == 1 && string(finals[0].Result.Data) != string(wire.Result.Data) {
		t.Errorf("PA-OPS3-04: OnFinal got result data %q, the Company sent %s", finals[0].Result.Data, wire.Result.Data)
	}
	if fi.Performed != 1 {
		t.Errorf("performed %d times", fi.Performed)
	}
	// PA-OPS3-08: no reads after final.
	before := len(e.Requests())
	if again, err := e.c.Track(ctx, op.ID); err != nil || again.State != operations.StateSucceeded {
		t.Errorf("Track of a final operation: %v %v", again, err)
	}
	if len(e.Requests()) != before {
		t.Error("Track of a final operation sent a request")
	}
}

// PA-OPS2-03: the client metadata lists the extension exactly when the
// identity does.
func TestAdvertise(t *testing.T) {
	e := newEnv(t, nil, nil)
	md, ok := e.Srv.Sessions().ClientMetadata(testenv.ClientID)
	if !ok {
		t.Fatal("the fake never fetched the metadata")
	}
	var doc struct {
		Extensions map[string]struct {
			Version string `json:"version"`
		} `json:"extensions"`
	}
	json.Unmarshal(md, &doc)
	if doc.Extensions["operations"].Version != "1" {
		t.Errorf("operations on: metadata %s", md)
	}
	off := testenv.New(t, nil, nil)
	sess := off.Session("u")
	md, _ = off.Srv.Sessions().ClientMetadata(testenv.ClientID)
	if strings.Contains(string(md), `"operations"`) {
		t.Errorf("operations off: metadata %s", md)
	}
	// PA-OPS2-01: an agent that doesn't list it gets no Client.
	if _, err := operations.New(sess, nil); !errors.Is(err, operations.ErrNotSupported) {
		t.Errorf("New without the extension: %v", err)
	}
}

// PA-OPS2-01: version "2", or no endpoint, leaves operations unavailable
// and nothing reaches the endpoint.
func TestUnsupportedVersion(t *testing.T) {
	for _, entry := range []map[string]any{
		{"version": "2", "endpoint": "https://api.example.test/poppy/operations"},
		{"version": "1"},
		{"version": "1", "endpoint": "http://api.example.test/poppy/operations"},
	} {
		srv := poppytest.NewServer(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{Extensions: map[string]any{"operations": entry}, DocumentFields: map[string]any{}}})
		id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
		te := &testenv.Env{T: t, Srv: srv, ID: id, Key: key}
		te.Serve(nil)
		te.Agent = te.NewAgent(nil)
		sess := te.Session("u")
		if _, err := operations.New(sess, nil); !errors.Is(err, operations.ErrNotSupported) {
			t.Errorf("%v: New = %v", entry, err)
		}
		if n := len(te.Requests(poppytest.EndpointOperations)); n != 0 {
			t.Errorf("%v: %d requests to the endpoint", entry, n)
		}
	}
}

// PA-OPS2-02: with a resource, the endpoint gets a token issued for it.
func TestResourceToken(t *testing.T) {
	const res = "https://api.example.test/poppy/operations"
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Resource: res}}, nil)
	op := e.propose("itm_4Qa")
	done, err := e.c.Handle(ctx, op, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	all := e.Requests()
	tokenAt, confirmAt := -1, -1
	for i, r := range all {
		if r.Endpoint == poppytest.EndpointToken && r.Form.Get("resource") == res && tokenAt < 0 {
			tokenAt = i
		}
		if r.Endpoint == poppytest.EndpointOperations && strings.HasSuffix(r.Path, "/confirm") && confirmAt < 0 {
			confirmAt = i
			if ti, _ := e.Srv.Tokens().Get(r.AccessToken); ti.Resource != res {
				t.Errorf("confirm sent with a token for %q", ti.Resource)
			}
		}
	}
	if tokenAt < 0 || confirmAt < 0 || tokenAt > confirmAt {
		t.Errorf("resource token request at %d, confirm at %d", tokenAt, confirmAt)
	}
}

// PA-OPS3-01: lenient parsing; strict bounds.
func TestParse(t *testing.T) {
	op, err := operations.Parse([]byte(`{"operation_id":"x1","revision":1,"state":"proposed","summary":"s","confirmation":null,"result":null,"x_future":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if op.UserApprovalRequired || op.Terms != nil || op.URL != "" || !op.ExpiresAt.IsZero() {
		t.Errorf("%+v", op)
	}
	for _, bad := range []string{
		`{"revision":1,"state":"proposed","summary":"s"}`,
		`{"operation_id":"x","revision":0,"state":"proposed","summary":"s"}`,
		`{"operation_id":"x","revision":1.5,"state":"proposed","summary":"s"}`,
		`{"operation_id":"x","revision":1,"state":"done","summary":"s"}`,
		`{"operation_id":"x","revision":1,"state":"proposed"}`,
		`{"operation_id":"x","revision":1,"state":"proposed","summary":"s","terms":[1]}`,
		`{"operation_id":"x\u001b[2J","revision":1,"state":"proposed","summary":"s"}`,
		`{"operation_id":"x","revision":1,"state":"proposed","summary":"` + strings.Repeat("a", 20<<10) + `"}`,
		`[]`,
	} {
		if _, err := operations.Parse([]byte(bad)); !errors.Is(err, operations.ErrProtocol) {
			t.Errorf("Parse(%.60s) = %v", bad, err)
		}
	}
	// A non-https url is dropped.
	op, _ = operations.Parse([]byte(`{"operation_id":"x","revision":1,"state":"proposed","summary":"s","url":"javascript:alert(1)"}`))
	if op.URL != "" {
		t.Errorf("url kept: %q", op.URL)
	}
	if got := operations.PlainText("a\x1b[31mred\u202e", 0); strings.ContainsAny(got, "\x1b\u202e") {
		t.Errorf("PlainText kept control characters: %q", got)
	}
}

// PA-OPS3-02, PA-OPS3-07: an expired revision is refused locally.
func TestExpiredLocally(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	a, err := e.c.Approve(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	e.Srv.Clock().Advance(16 * time.Minute)
	if _, err := e.c.Confirm(ctx, a, nil); !errors.Is(err, operations.ErrOperationExpired) {
		t.Errorf("Confirm after expires_at: %v", err)
	}
	if _, err := e.c.Approve(ctx, op); !errors.Is(err, operations.ErrOperationExpired) {
		t.Errorf("Approve after expires_at: %v", err)
	}
	if n := len(e.confirms()); n != 0 {
		t.Errorf("%d confirms", n)
	}
	// The Company reports expired; a new proposal is a new operation.
	got, err := e.c.Get(ctx, op.ID)
	if err != nil || got.State != operations.StateExpired {
		t.Fatalf("%v %v", got, err)
	}
	next := e.propose("itm_4Qa")
	if next.ID == op.ID {
		t.Error("a new proposal reused the expired operation")
	}
	if info(t, e.Srv, op.ID).Performed != 0 {
		t.Error("expired operation performed")
	}
}

// PA-OPS3-03, PA-OPS5-17, PA-OPS6-01: in_progress with Retry-After is read
// again no sooner.
func TestSlowTracked(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow, SlowFor: 9 * time.Second, RetryAfter: 3}}, nil)
	op := e.propose("itm_4Qa")
	done, err := e.c.Handle(ctx, op, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	reads := e.opRequests("")
	if len(reads) < 3 {
		t.Fatalf("%d reads", len(reads))
	}
	prev := e.confirms()[0].Time
	for _, r := range reads {
		if r.Time.Sub(prev) < 3*time.Second {
			t.Errorf("read %v after the previous request, Retry-After was 3 s", r.Time.Sub(prev))
		}
		prev = r.Time
	}
}

// PA-OPS6-02: without Retry-After, reads are at least 1 s apart, backing
// off.
func TestBackoffWithoutRetryAfter(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow, SlowFor: 20 * time.Second, OmitRetryAfter: true}}, nil)
	done, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	reads := e.opRequests("")
	prev, gap := e.confirms()[0].Time, time.Duration(0)
	for _, r := range reads {
		d := r.Time.Sub(prev)
		if d < time.Second || d < gap {
			t.Errorf("gap %v after %v", d, gap)
		}
		prev, gap = r.Time, d
	}
}

// PA-OPS3-05, CO-OPS6-05: a failed operation's partial changes reach the
// app.
func TestFailedPartway(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformFailPartway}}, nil)
	done, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != operations.StateFailed || done.Result == nil || !strings.Contains(done.Result.Summary, "return label") {
		t.Errorf("%+v", done)
	}
}

// PA-OPS3-06, PA-OPS7-01, PA-OPS7-02: declining cancels the proposal.
func TestDeclineCancels(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.ap.answer = func(*operations.ApprovalRequest) operations.Decision { return operations.Decline }
	op := e.propose("itm_4Qa")
	done, err := e.c.Handle(ctx, op, nil)
	if !errors.Is(err, operations.ErrDeclined) {
		t.Fatalf("Handle: %v", err)
	}
	if done.State != operations.StateCancelled || done.Result == nil || done.Result.Summary == "" {
		t.Errorf("%+v", done)
	}
	if c := e.opRequests("/cancel"); len(c) != 1 || c[0].Path != "/poppy/operations/"+op.ID+"/cancel" {
		t.Errorf("cancels %v", c)
	}
	if len(e.confirms()) != 0 || info(t, e.Srv, op.ID).Performed != 0 {
		t.Error("a declined operation was confirmed")
	}
}

// PA-OPS7-03: cancelling in_progress keeps reading until final.
func TestCancelInProgress(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow}}, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	if got, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{NoTrack: true}); err != nil || got.State != operations.StateInProgress {
		t.Fatalf("Submit in slow mode: %v %v", got, err)
	}
	done, err := e.c.Cancel(ctx, op.ID)
	if err != nil || done.State != operations.StateCancelled {
		t.Fatalf("%v %v", done, err)
	}
	if len(e.opRequests("")) == 0 {
		t.Error("no reads after cancelling in_progress")
	}
	// PA-OPS7-04: cancelling a final operation returns it, no error.
	again, err := e.c.Cancel(ctx, op.ID)
	if err != nil || again.State != operations.StateCancelled {
		t.Errorf("%v %v", again, err)
	}
}

// PA-OPS7-04: cancelling a succeeded operation returns it unchanged.
func TestCancelSucceeded(t *testing.T) {
	e := newEnv(t, nil, nil)
	done, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.c.Cancel(ctx, done.ID)
	if err != nil || got.State != operations.StateSucceeded || got.Result.Summary != done.Result.Summary {
		t.Errorf("%v %v", got, err)
	}
}

// PA-OPS3-09 and OPS 4: one operation across channels.
func TestOneOperationAcrossChannels(t *testing.T) {
	var late atomic.Pointer[json.RawMessage]
	e := newEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		tn.Reply(poppytest.Reply{Text: "Here it is", Operation: *late.Load()})
	}}}, nil)
	op := e.propose("itm_4Qa")
	if _, err := e.Srv.Operations().Revise(op.ID); err != nil {
		t.Fatal(err)
	}
	rev2, err := e.c.Get(ctx, op.ID)
	if err != nil || rev2.Revision != 2 {
		t.Fatalf("%v %v", rev2, err)
	}
	// The conversation delivers revision 1 late: the SDK keeps revision 2.
	old, _ := json.Marshal(op)
	late.Store((*json.RawMessage)(&old))
	conv, err := conversation.Start(ctx, e.sess, conversation.Text("Show it again."), &conversation.StartOptions{Options: conversation.Options{Operations: e.c}})
	if err != nil {
		t.Fatal(err)
	}
	var view *operations.Operation
	for ev, err := range conv.Events(ctx, &conversation.EventsOptions{UntilIdle: true, LongPoll: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany {
			view, err = ev.Message.Operation, ev.Message.OperationError
			if err != nil || view == nil || view.Revision != 2 {
				t.Errorf("stale revision replaced the newer one: %v %v", view, err)
			}
		}
	}
	if view == nil {
		t.Fatal("no message with the operation")
	}
	done, err := e.c.Handle(ctx, view, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatal(err)
	}
	// A final state is never replaced by an older view.
	if v, _ := e.c.Observe(rev2, exchangeAction); v.State != operations.StateSucceeded {
		t.Errorf("final replaced: %v", v.State)
	}
	// Changed terms under a seen revision are a protocol error.
	changed := done.Clone()
	changed.Summary = "Exchange for something else"
	if _, err := e.c.Observe(changed, exchangeAction); !errors.Is(err, operations.ErrProtocol) {
		t.Errorf("changed revision: %v", err)
	}
}

// OPS 4: one operation per operation_id across channels by default. A
// conversation started without Options.Operations finds the Client New
// made first for the Session (SessionClient), so the revision 1 a message
// brings late is that Client's view, revision 2, as it is when the Client
// is passed by hand (TestOneOperationAcrossChannels). A later New for the
// same Session makes a Client of its own, as another process would.
func TestSessionClientFoundByDefault(t *testing.T) {
	var late atomic.Pointer[json.RawMessage]
	e := newEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		tn.Reply(poppytest.Reply{Text: "Here it is", Operation: *late.Load()})
	}}}, nil)
	if got := operations.SessionClient(e.sess); got != e.c {
		t.Fatalf("SessionClient = %p, want the first Client New made, %p", got, e.c)
	}
	if c2, err := operations.New(e.sess, nil); err != nil || c2 == e.c || operations.SessionClient(e.sess) != e.c {
		t.Fatalf("a later New: %v; the Session's Client changed or was reused", err)
	}
	op := e.propose("itm_4Qa")
	if _, err := e.Srv.Operations().Revise(op.ID); err != nil {
		t.Fatal(err)
	}
	if rev2, err := e.c.Get(ctx, op.ID); err != nil || rev2.Revision != 2 {
		t.Fatalf("%v %v", rev2, err)
	}
	old, _ := json.Marshal(op)
	late.Store((*json.RawMessage)(&old))
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conv, err := conversation.Start(tctx, e.sess, conversation.Text("Show it again."), nil)
	if err != nil {
		t.Fatal(err)
	}
	var view *operations.Operation
	for ev, err := range conv.Events(tctx, &conversation.EventsOptions{UntilIdle: true, LongPoll: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany {
			view = ev.Message.Operation
		}
	}
	if view == nil {
		t.Fatal("no message with the operation")
	}
	if view.Revision != 2 {
		t.Fatalf("the conversation's view of the operation is at revision %d, want the Session's Client's 2", view.Revision)
	}
}

// PA-OPS3-09: a Company that changes a revision's terms gets no confirm.
func TestMutatedRevision(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	e.Srv.Operations().MutateRevision(op.ID)
	if _, err := e.c.Get(ctx, op.ID); !errors.Is(err, operations.ErrProtocol) {
		t.Fatalf("Get: %v", err)
	}
	if _, err := e.c.Handle(ctx, op, nil); !errors.Is(err, operations.ErrProtocol) {
		t.Errorf("Handle: %v", err)
	}
	if n := len(e.confirms()); n != 0 || len(e.ap.asked()) != 0 {
		t.Errorf("%d confirms, %d approvals asked", n, len(e.ap.asked()))
	}
	// The SDK's view keeps the original summary.
	if v, _ := e.c.Observe(op, exchangeAction); v.Summary != op.Summary {
		t.Errorf("view changed: %q", v.Summary)
	}
}

// PA-OPS5-01, PA-OPS5-11, PA-OPS5-15: an approval covers one revision;
// terms_changed brings the new revision to the Approver before any second
// confirm.
func TestTermsChanged(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	a, err := e.c.Approve(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Srv.Operations().Revise(op.ID); err != nil {
		t.Fatal(err)
	}
	// The SDK hasn't seen revision 2: the confirm goes out and gets 409.
	_, err = e.c.Confirm(ctx, a, nil)
	var oe *operations.Error
	if !errors.As(err, &oe) || testenv.Code(err) != "terms_changed" || oe.Operation == nil || oe.Operation.Revision != 2 {
		t.Fatalf("Confirm of the old revision: %v", err)
	}
	// PA-OPS5-01: the old approval is refused locally now.
	n := len(e.confirms())
	if _, err := e.c.Confirm(ctx, a, nil); !errors.Is(err, operations.ErrApprovalMismatch) {
		t.Errorf("old approval: %v", err)
	}
	if len(e.confirms()) != n {
		t.Error("old approval sent a confirm")
	}
	done, err := e.c.Handle(ctx, oe.Operation, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	asked := e.ap.asked()
	if len(asked) != 2 || asked[1].Revision != 2 || asked[1].Summary != oe.Operation.Summary || !strings.Contains(asked[1].Summary, "(L)") {
		t.Fatalf("asked %v", asked)
	}
	// The second question came before the second confirm.
	if e.ap.confirm[1] != 1 {
		t.Errorf("confirms before the second approval: %d", e.ap.confirm[1])
	}
	cs := e.confirms()
	if len(cs) != 2 || confirmBody(t, cs[1])["revision"] != float64(2) {
		t.Errorf("confirms %d", len(cs))
	}
	// CO-OPS3-08 seen from the SDK: the performed terms are revision 2's.
	acts := e.Srv.Operations().Performed()
	if len(acts) != 1 || acts[0].Terms["replacement_sku"] != "stormline-insulated-l" {
		t.Errorf("performed %v", acts)
	}
}

// PA-OPS5-14: sign_in_required on confirm → the SDK signs in with the
// stored Account Token and sends the same confirm again.
func TestConfirmAfterSignInRequired(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	e.Srv.Sessions().SignOut(e.sess.ID())
	done, err := e.c.Confirm(ctx, a, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	cs := e.confirms()
	if len(cs) != 2 || cs[0].ErrorCode != "sign_in_required" || string(cs[0].Body) != string(cs[1].Body) {
		t.Fatalf("confirms: %d %q", len(cs), cs[0].ErrorCode)
	}
}

// PA-OPS5-14: insufficient_scope comes back; after signing in, the same
// Approval sends the same confirm.
func TestConfirmAfterInsufficientScope(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	e.Srv.Faults().ForceError(poppytest.EndpointOperations, poppytest.Fault{Code: "insufficient_scope"})
	_, err := e.c.Confirm(ctx, a, nil)
	var pe *poppy.Error
	if !errors.Is(err, poppy.ErrInsufficientScope) || !errors.As(err, &pe) || len(pe.Scope) != 2 {
		t.Fatalf("Confirm: %v", err)
	}
	signIn(t, e.Env, e.sess)
	done, err := e.c.Confirm(ctx, a, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	cs := e.confirms()
	if len(cs) != 2 || string(cs[0].Body) != string(cs[1].Body) {
		t.Errorf("confirms %d", len(cs))
	}
}

// PA-OPS5-16: user_approval_required → ask the User, confirm as "user".
func TestUserApprovalRequiredAnswer(t *testing.T) {
	e := newEnv(t, nil, nil)
	grantExchange(t, e, nil)
	op := e.propose("itm_4Qa")
	e.Srv.Faults().ForceError(poppytest.EndpointOperations, poppytest.Fault{Status: 403, Code: "user_approval_required"})
	done, err := e.c.Handle(ctx, op, nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	cs := e.confirms()
	if len(cs) != 2 || confirmBody(t, cs[0])["approved_by"] != "standing_permission" || confirmBody(t, cs[1])["approved_by"] != "user" {
		t.Fatalf("confirms %d", len(cs))
	}
	asked := e.ap.asked()
	if len(asked) != 1 || asked[0].Reason != "user_approval_required" || e.ap.confirm[0] != 1 {
		t.Errorf("asked %v", asked)
	}
}

// PA-OPS5-05: user_approval_required on the operation: the Approver is
// asked even though a permission matches. The rule is kept in three
// places, and this test fails when any one of them is broken: approve
// doesn't consult standing permissions at all, the matcher refuses such an
// operation, and Confirm refuses a standing approval once the flag is set.
func TestUserApprovalRequiredFlag(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{UserApprovalRequired: true}}, nil)
	grantExchange(t, e, nil)
	op := e.propose("itm_4Qa")
	if !op.UserApprovalRequired {
		t.Fatal("flag not parsed")
	}
	if _, err := e.c.Handle(ctx, op, nil); err != nil {
		t.Fatal(err)
	}
	asked := e.ap.asked()
	if len(asked) != 1 {
		t.Fatal("the Approver was not asked")
	}
	// PA-OPS5-05, in approve: no standing permission was consulted, so
	// none is reported as failing; the request says why the User is asked.
	if !asked[0].UserApprovalRequired || asked[0].Permission != nil {
		t.Errorf("UserApprovalRequired %v, Permission %v: the permissions were consulted", asked[0].UserApprovalRequired, asked[0].Permission)
	}
	if b := confirmBody(t, e.confirms()[0]); b["approved_by"] != "user" {
		t.Errorf("approved_by %v", b["approved_by"])
	}
	// PA-OPS5-05, in the matcher: a permission covering every term does
	// not cover an operation with the flag.
	now := e.Srv.Clock().Now()
	p := fullPermission(now)
	sub := subject(now, jacketTerms)
	if err := p.Check(sub); err != nil {
		t.Fatalf("without the flag: %v", err)
	}
	sub.Operation.UserApprovalRequired = true
	var me *operations.MismatchError
	if err := p.Check(sub); !errors.As(err, &me) || !strings.Contains(me.Reason, "the User's own approval") {
		t.Errorf("with the flag: %v", err)
	}
	// PA-OPS5-05, in Confirm: a standing approval of a revision whose
	// view then carries the flag is never sent.
	e2 := newEnv(t, nil, nil)
	grantExchange(t, e2, nil)
	op2 := e2.propose("itm_4Qa")
	a, err := e2.c.Approve(ctx, op2)
	if err != nil || a.By() != operations.ApprovedByStandingPermission {
		t.Fatalf("Approve: %v %v", a, err)
	}
	flagged := op2.Clone()
	flagged.UserApprovalRequired = true
	if v, err := e2.c.Observe(flagged, exchangeAction); err != nil || !v.UserApprovalRequired {
		t.Fatalf("Observe: %v %v", v, err)
	}
	if _, err := e2.c.Confirm(ctx, a, nil); !errors.Is(err, operations.ErrApprovalMismatch) {
		t.Errorf("Confirm of a standing approval with the flag set: %v", err)
	}
	if n := len(e2.confirms()); n != 0 {
		t.Errorf("%d confirms sent", n)
	}
}

// PA-OPS5-18: a repeated confirm returns the result, not an error.
func TestRepeatedConfirm(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	if _, err := e.c.Handle(ctx, op, nil); err != nil {
		t.Fatal(err)
	}
	// A second Client (another process) with the proposal's old view.
	c2, err := operations.New(e.sess, &operations.Options{Approver: e.ap})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := c2.Observe(op, exchangeAction)
	a, err := c2.Approve(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	done, err := c2.Confirm(ctx, a, nil)
	if err != nil || done.State != operations.StateSucceeded || done.Result == nil {
		t.Fatalf("%v %v", done, err)
	}
	if n := len(e.confirms()); n != 2 {
		t.Errorf("%d confirms", n)
	}
	if info(t, e.Srv, op.ID).Performed != 1 {
		t.Error("performed twice")
	}
}

// PA-OPS6-03: the confirm response is lost after the Company performed:
// the SDK retries with the same operation ID and gets succeeded.
func TestLostConfirmResponse(t *testing.T) {
	for _, f := range []poppytest.OperationFault{poppytest.FaultLoseResponse, poppytest.FaultCut, poppytest.Fault5xxAfter, poppytest.Fault503} {
		e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Faults: func(r poppytest.OperationRequest) poppytest.OperationFault {
			if r.Kind == "confirm" && r.Attempt == 1 {
				return f
			}
			return poppytest.FaultNone
		}}}, nil)
		op := e.propose("itm_4Qa")
		done, err := e.c.Handle(ctx, op, nil)
		if err != nil || done.State != operations.StateSucceeded {
			t.Fatalf("fault %d: %v %v", f, done, err)
		}
		cs := e.confirms()
		if len(cs) != 2 || string(cs[0].Body) != string(cs[1].Body) {
			t.Errorf("fault %d: %d confirms", f, len(cs))
		}
		if n := len(e.Requests(poppytest.EndpointAPI)); n != 1 {
			t.Errorf("fault %d: %d proposals", f, n)
		}
		if info(t, e.Srv, op.ID).Performed != 1 {
			t.Errorf("fault %d: performed %d", f, info(t, e.Srv, op.ID).Performed)
		}
	}
}

// PA-OPS6-04: while the operation is open, proposing the same request
// again returns it and sends nothing.
func TestNoSecondProposal(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformUnknown}}, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	if got, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{NoTrack: true}); err != nil || got.State != operations.StateInProgress {
		t.Fatalf("Submit: %v %v", got, err)
	}
	got, resp, err := e.c.Propose(ctx, e.exchangeRequest("itm_4Qa"), exchangeAction, nil)
	var pe *operations.PendingError
	if !isPending(err) || !errors.As(err, &pe) || got == nil || got.ID != op.ID || resp != nil {
		t.Fatalf("second Propose: %v %v", got, err)
	}
	if n := len(e.Requests(poppytest.EndpointAPI)); n != 1 {
		t.Errorf("%d proposals sent", n)
	}
	// CO-OPS6-04 seen from the SDK: in_progress until the Company knows.
	if v, _ := e.c.Get(ctx, op.ID); v.State != operations.StateInProgress {
		t.Errorf("state %v", v.State)
	}
	if err := e.Srv.Operations().Resolve(op.ID, "succeeded"); err != nil {
		t.Fatal(err)
	}
	done, err := e.c.Track(ctx, op.ID)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	// PA-OPS3-08: once final, the retry path sends a new proposal.
	next := e.propose("itm_4Qa")
	if next.ID == op.ID || len(e.Requests(poppytest.EndpointAPI)) != 2 {
		t.Errorf("new proposal %s", next.ID)
	}
}

// PA-OPS7-05: withdrawn before confirm → no confirm.
func TestWithdrawBeforeConfirm(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	if _, err := a.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Confirm(ctx, a, nil); !errors.Is(err, operations.ErrApprovalWithdrawn) {
		t.Errorf("Confirm: %v", err)
	}
	if len(e.confirms()) != 0 || len(e.opRequests("/cancel")) != 0 {
		t.Error("requests sent")
	}
}

// PA-OPS7-06: withdrawn after confirm → cancel.
func TestWithdrawAfterConfirm(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow}}, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	if got, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{NoTrack: true}); err != nil || got.State != operations.StateInProgress {
		t.Fatalf("Submit: %v %v", got, err)
	}
	done, err := a.Withdraw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.opRequests("/cancel")) != 1 || done.State != operations.StateCancelled {
		t.Errorf("withdraw after confirm: %v", done)
	}
}

// PA-OPS9-01: operation_not_found is typed, not retried, and drops the
// local state.
func TestNotFound(t *testing.T) {
	e := newEnv(t, nil, nil)
	before := len(e.Requests())
	_, err := e.c.Get(ctx, "exc_nope")
	var pe *poppy.Error
	if testenv.Code(err) != "operation_not_found" || !errors.As(err, &pe) || pe.Status != 404 {
		t.Fatalf("%v", err)
	}
	if n := len(e.Requests()) - before; n != 1 {
		t.Errorf("%d requests", n)
	}
	// A foreign operation: another User's.
	other := e.propose("itm_4Qa")
	sess2 := e.Session("someone-else")
	c2, _ := operations.New(sess2, nil)
	c2.Observe(other, exchangeAction)
	if _, err := c2.Get(ctx, other.ID); testenv.Code(err) != "operation_not_found" {
		t.Errorf("foreign: %v", err)
	}
	if _, err := c2.Track(ctx, other.ID); testenv.Code(err) != "operation_not_found" {
		t.Errorf("Track after not found: %v", err)
	}
}

// OPS 3, 4: an operation object reads the same whatever channel carried
// it. The channels' envelopes are their packages': an API's 202 and an MCP
// tool result's structuredContent are read by package api
// (api.Response.Operation, api.ToolResult.Operation; PA-OPS4-02 there), a
// message by package conversation (ReceivedMessage.Operation; PA-OPS4-03
// there), each handing over an *Operation.
func TestChannels(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	raw, _ := json.Marshal(op)
	got, err := operations.Parse(raw)
	if err != nil || got.ID != op.ID || got.State != operations.StateProposed || got.Revision != op.Revision || got.Summary != op.Summary {
		t.Fatalf("Parse: %v %v", got, err)
	}
	for _, none := range []string{``, `null`, " \n "} {
		if _, err := operations.Parse([]byte(none)); !errors.Is(err, operations.ErrNoOperation) {
			t.Errorf("Parse(%q): %v, want ErrNoOperation", none, err)
		}
	}
	// An agent without the extension: the exchange is performed directly.
	off := testenv.New(t, nil, nil)
	sess := off.Session("u")
	signIn(t, off, sess)
	req, _ := http.NewRequest("POST", off.Srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(`{}`))
	resp, err := sess.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operations.FromResponse(resp); !errors.Is(err, operations.ErrNoOperation) || resp.StatusCode != 201 {
		t.Errorf("without the extension: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}

// PA-3.3-06: extension_required from an API is a typed error naming the
// extension, and nothing is retried.
func TestExtensionRequired(t *testing.T) {
	off := testenv.New(t, &poppytest.Options{Operations: poppytest.OperationsOptions{RequireOperations: true}}, nil)
	sess := off.Session("u")
	signIn(t, off, sess)
	req, _ := http.NewRequest("POST", off.Srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(`{}`))
	resp, err := sess.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = operations.FromResponse(resp)
	var xr poppy.ExtensionRequiredError
	if !errors.Is(err, poppy.ErrExtensionRequired) || !errors.As(err, &xr) || xr.Extension != "operations" {
		t.Errorf("%v", err)
	}
	if n := len(off.Requests(poppytest.EndpointAPI)); n != 1 {
		t.Errorf("%d requests", n)
	}
}

// PA-3.3-05: unknown members in every operation answer change nothing.
func TestNoise(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Noise: true, Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow}}, nil)
	done, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
}

// PA-OPS4-04: the SDK confirms only at the endpoint: nothing in the suite
// ever requests the operation's website page.
func TestConfirmOnlyAtEndpoint(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	if _, err := e.c.Handle(ctx, op, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Requests() {
		if strings.Contains(r.Path, "/operations/") && r.Endpoint != poppytest.EndpointOperations {
			t.Errorf("website request %s %s", r.Method, r.URL)
		}
	}
	if cs := e.confirms(); len(cs) != 1 || cs[0].Host != "api.example.test" {
		t.Errorf("confirms %v", cs)
	}
}
