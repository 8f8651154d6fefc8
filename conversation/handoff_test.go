package conversation_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func TestPA_7_9_Handoff(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	st, err := c.Handoff(ctx)
	// PA-7.9-02, PA-7.7-03: queued, responder still agent.
	if err != nil || st != conversation.StatusQueued || c.Status() != conversation.StatusQueued || c.Responder() != conversation.ResponderAgent {
		t.Fatalf("Handoff: %v %q %q", err, st, c.Responder())
	}
	// PA-7.9-06: messages while waiting.
	if _, err := c.Send(ctx, conversation.UpdateContext(conversation.Context{UserAvailable: conversation.Available(true)}), nil); err != nil {
		t.Fatal(err)
	}
	// PA-7.9-03: a person joins.
	e.Srv.Conversations().JoinHuman(c.ID())
	collect(t, c, nil, func(ev conversation.Event) bool {
		return ev.Type == conversation.EventState && ev.Responder == conversation.ResponderHuman
	})
	if c.Responder() != conversation.ResponderHuman {
		t.Fatalf("responder %q", c.Responder())
	}
}

func TestPA_7_9_04_NoOneAvailable(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	if _, err := c.Handoff(ctx); err != nil {
		t.Fatal(err)
	}
	e.Srv.Conversations().NoHumanAvailable(c.ID())
	evs := collect(t, c, nil, func(ev conversation.Event) bool {
		return ev.Type == conversation.EventMessage && strings.Contains(ev.Message.Text, "Nobody")
	})
	// PA-7.9-04: idle, agent, and the message saying why.
	if c.Status() != conversation.StatusIdle || c.Responder() != conversation.ResponderAgent || evs[len(evs)-1].Message.Sender != conversation.SenderAgent {
		t.Fatalf("%q %q", c.Status(), c.Responder())
	}
}

func TestPA_7_9_05_CompanyHandsOff(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		tn.Say("Let me get a colleague.")
		tn.Handoff()
	}})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, nil, func(ev conversation.Event) bool { return ev.Type == conversation.EventState })
	// PA-7.9-05: reflected without Handoff being called.
	if c.Status() != conversation.StatusQueued {
		t.Fatalf("status %q", c.Status())
	}
	for _, r := range e.convRequests() {
		if strings.HasSuffix(r.Path, "/handoff") {
			t.Fatal("handoff requested")
		}
	}
}

func TestDirectConversations(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		if tn.Message.Text == "Can I talk to them?" {
			tn.RequestUser("A specialist needs to confirm the exchange with the customer.")
		}
		tn.Say("Noted.")
	}})
	parent := e.start(t, conversation.Text("Can I talk to them?"), nil)
	var reason string
	for ev, err := range parent.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventUserRequested {
			reason = ev.Reason
		}
	}
	// PA-7.10-04: the reason reaches the caller; nothing started by itself.
	if reason == "" || len(e.Srv.Conversations().All()) != 1 {
		t.Fatalf("reason %q, %d conversations", reason, len(e.Srv.Conversations().All()))
	}
	words := "Hi, I have a question about the exchange. ¿Medium?"
	direct, err := conversation.StartDirect(ctx, e.sess, parent.ID(), conversation.Human(words), nil)
	if err != nil {
		t.Fatal(err)
	}
	reqs := e.convRequests()
	b := bodyOf(t, reqs[len(reqs)-1])
	// PA-7.10-01: parent_conversation_id and the message; PA-7.10-02: the
	// User's words byte for byte, sender human.
	m := b["message"].(map[string]any)
	if b["parent_conversation_id"] != parent.ID() || m["sender"] != "human" || m["text"] != words {
		t.Fatalf("body %s", reqs[len(reqs)-1].Body)
	}
	if direct.Parent() != parent.ID() {
		t.Fatalf("parent %q", direct.Parent())
	}
	// PA-7.10-02: replies reach the caller.
	if got := texts(collect(t, direct, &conversation.EventsOptions{UntilIdle: true}, nil)); len(got) != 2 {
		t.Fatalf("direct events %v", got)
	}
	// PA-7.10-03: a second Direct start names the open one.
	_, err = conversation.StartDirect(ctx, e.sess, parent.ID(), conversation.Human("Again"), nil)
	var ce *conversation.Error
	if testenv.Code(err) != "direct_conversation_open" || !errors.As(err, &ce) || ce.ConversationID != direct.ID() {
		t.Fatalf("err = %v", err)
	}
	// PA-7.10-06: direct_opened marks the parent.
	collect(t, parent, nil, func(ev conversation.Event) bool { return ev.Type == conversation.EventDirectOpened })
	if parent.OpenDirect() != direct.ID() {
		t.Fatalf("OpenDirect %q", parent.OpenDirect())
	}
	// PA-7.10-07: messages to the parent get the typed error with its ID.
	_, err = parent.Send(ctx, conversation.Text("Meanwhile."), nil)
	if testenv.Code(err) != "direct_conversation_open" || !errors.As(err, &ce) || ce.ConversationID != direct.ID() {
		t.Fatalf("err = %v", err)
	}
	// PA-7.10-08: once closed, the parent takes messages again.
	if err := direct.Close(ctx); err != nil {
		t.Fatal(err)
	}
	collect(t, parent, nil, func(ev conversation.Event) bool { return ev.Type == conversation.EventDirectClosed })
	if parent.OpenDirect() != "" {
		t.Fatalf("OpenDirect %q", parent.OpenDirect())
	}
	if _, err := parent.Send(ctx, conversation.Text("Back to you."), nil); err != nil {
		t.Fatal(err)
	}
}

func TestDeclineUserRequest(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().RequestUser(c.ID(), "We need the customer.")
	if _, err := c.DeclineUserRequest(ctx, ""); err != nil {
		t.Fatal(err)
	}
	info, _ := e.Srv.Conversations().Get(c.ID())
	last := info.Messages[len(info.Messages)-1]
	// PA-7.10-05: said in the conversation, as the agent.
	if last.Sender != "agent" || !strings.Contains(last.Text, "isn't available") {
		t.Fatalf("message %+v", last)
	}
}

func TestParentClosesDirect(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	parent := e.start(t, conversation.Text("Hello."), nil)
	direct, err := conversation.StartDirect(ctx, e.sess, parent.ID(), conversation.Human("Hi."), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The Direct's loop ends at its closed state (PA-7.12-02).
	evs := readToEnd(t, direct, nil, func(ev conversation.Event) bool {
		return ev.Type == conversation.EventState && ev.Status == conversation.StatusClosed
	})
	// PA-7.10-09: the Direct ends closed; later sends fail locally.
	if last := evs[len(evs)-1]; last.Type != conversation.EventState || last.Status != conversation.StatusClosed {
		t.Fatalf("last %+v", last)
	}
	if st := direct.Status(); st != conversation.StatusClosed {
		t.Fatalf("the Direct's status is %s after its closed event", st)
	}
	before := len(e.convRequests())
	if _, err := direct.Send(ctx, conversation.Human("Hello?"), nil); !errors.Is(err, conversation.ErrConversationClosed) {
		t.Fatalf("err = %v", err)
	}
	// PA-7.10-09: locally: nothing reaches the Company.
	if rs := e.convRequests()[before:]; len(rs) != 0 {
		t.Fatalf("a Send on the closed Direct sent %d requests: %s %s", len(rs), rs[0].Method, rs[0].URL)
	}
}

// deviceSignIn signs sess in with Device Sign-In for scopes, the fake's
// User approving.
func deviceSignIn(t testing.TB, e *env, sess *poppy.Session, scopes ...string) {
	t.Helper()
	p := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := e.Srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	res, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: scopes}, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Require(scopes...); err != nil {
		t.Fatal(err)
	}
}

func TestSignInDuringConversation(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		need := []string{"poppy:read"}
		if strings.Contains(tn.Message.Text, "exchange") {
			need = append(need, "poppy:write")
		}
		if tn.RequireScopes(need...) {
			tn.Say("Done: " + tn.Message.Text)
		}
	}})
	c := e.start(t, conversation.Text("Where is order 1042?"), nil)
	var auth *poppy.Error
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventAuthorization {
			auth = ev.Authorization
		}
	}
	// The event carries what to do, as an API refusal does.
	if auth == nil || !errors.Is(auth, poppy.ErrSignInRequired) || len(auth.SignInTypes) == 0 {
		t.Fatalf("authorization %+v", auth)
	}
	// PA-7.11-01: sign in, and the same conversation goes on with the
	// signed-in token.
	deviceSignIn(t, e, e.sess, "poppy:read")
	if _, err := c.Send(ctx, conversation.Text("I signed in: where is order 1042?"), nil); err != nil {
		t.Fatal(err)
	}
	reqs := e.convRequests()
	tok, _ := e.Srv.Tokens().Get(reqs[len(reqs)-1].AccessToken)
	if !tok.SignedIn {
		t.Fatal("the message went with a signed-out token")
	}
	got := texts(collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil))
	if len(got) != 2 || !strings.HasPrefix(got[1], "company:Done:") {
		t.Fatalf("after sign-in %v", got)
	}
	// PA-7.11-02: insufficient_scope names the scopes; signing in for them
	// asks for them, and the conversation continues.
	if _, err := c.Send(ctx, conversation.Text("Please exchange it."), nil); err != nil {
		t.Fatal(err)
	}
	auth = nil
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventAuthorization {
			auth = ev.Authorization
		}
	}
	if auth == nil || !errors.Is(auth, poppy.ErrInsufficientScope) || strings.Join(auth.Scope, " ") != "poppy:read poppy:write" {
		t.Fatalf("authorization %+v", auth)
	}
	deviceSignIn(t, e, e.sess, auth.Scope...)
	var devReq *poppytest.Request
	for _, r := range e.Requests(poppytest.EndpointDevice) {
		devReq = &r
	}
	if devReq == nil || devReq.Form.Get("scope") != "poppy:read poppy:write" {
		t.Fatalf("device request %+v", devReq)
	}
	if _, err := c.Send(ctx, conversation.Text("Please exchange it now."), nil); err != nil {
		t.Fatal(err)
	}
	got = texts(collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil))
	if len(got) != 2 || !strings.HasPrefix(got[1], "company:Done:") {
		t.Fatalf("after the second sign-in %v", got)
	}
	// PA-7.11-03: a renewed token, the same conversation.
	if _, err := e.sess.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, conversation.Text("Thanks."), nil); err != nil {
		t.Fatal(err)
	}
	// PA-7.11-04: another Session of the same User continues it.
	s2, err := e.Company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s2.UseAccountToken(ctx, nil); !ok || err != nil {
		t.Fatalf("UseAccountToken: %v %v", ok, err)
	}
	c2, err := conversation.Resume(ctx, s2, c.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Send(ctx, conversation.Text("From the other Session."), nil); err != nil {
		t.Fatal(err)
	}
	// PA-4.8-09: no Account Token in any conversation message.
	var acct []string
	for _, s := range []*poppy.Session{e.sess, s2} {
		if info, ok := e.Srv.Sessions().Get(s.ID()); ok && info.AccountToken != "" {
			acct = append(acct, info.AccountToken)
		}
	}
	if len(acct) == 0 {
		t.Fatal("no Account Token to look for")
	}
	for _, r := range e.convRequests() {
		for _, a := range acct {
			if strings.Contains(string(r.Body), a) || strings.Contains(r.URL, a) {
				t.Fatalf("Account Token in %s", r.URL)
			}
		}
	}
	if n := len(e.Srv.Conversations().All()); n != 1 {
		t.Fatalf("%d conversations", n)
	}
	// PA-7.11-05: signed out, the conversation that used the account says
	// sign_in_required; no new conversation is started.
	if err := e.sess.SignOut(ctx, ""); err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(ctx, conversation.Text("Still there?"), nil)
	if !errors.Is(err, poppy.ErrSignInRequired) {
		t.Fatalf("err = %v", err)
	}
	if n := len(e.Srv.Conversations().All()); n != 1 {
		t.Fatalf("%d conversations", n)
	}
}

func TestConversationErrors(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	// PA-7.13-01: conversation_not_found, typed, one request.
	c, err := conversation.Resume(ctx, e.sess, "cnv_unknown", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.convRequests())
	_, err = c.Send(ctx, conversation.Text("Hello?"), nil)
	var pe *poppy.Error
	if testenv.Code(err) != "conversation_not_found" || !errors.As(err, &pe) || pe.Status != http.StatusNotFound {
		t.Fatalf("err = %v", err)
	}
	if n := len(e.convRequests()) - before; n != 1 {
		t.Fatalf("%d requests", n)
	}
	for _, ev := range collectErr(c) {
		if testenv.Code(ev) != "conversation_not_found" {
			t.Fatalf("Events: %v", ev)
		}
	}
	// PA-7.13-02: conversation_closed marks it closed, no retry.
	c = e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().Close(c.ID())
	before = len(e.convRequests())
	if _, err := c.Send(ctx, conversation.Text("Hi?"), nil); !errors.Is(err, conversation.ErrConversationClosed) {
		t.Fatalf("err = %v", err)
	}
	if c.Status() != conversation.StatusClosed || len(e.convRequests())-before != 1 {
		t.Fatalf("status %q, %d requests", c.Status(), len(e.convRequests())-before)
	}
	// PA-7.13-04: an unknown code is a *poppy.Error with status and code.
	c = e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusConflict, Code: "future_code"})
	_, err = c.Send(ctx, conversation.Text("Hi."), nil)
	if !errors.As(err, &pe) || pe.Status != http.StatusConflict || pe.Code != "future_code" {
		t.Fatalf("err = %v", err)
	}
	// 5xx and 429 are retried with the same bytes: two 5xx by the
	// conversation, then three 429 by the Session transport (bounded:
	// TestPostRetriesBounded).
	e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusServiceUnavailable, Times: 2})
	e.Srv.Faults().RateLimit(poppytest.EndpointConversation, 3, "1")
	if _, err := c.Send(ctx, conversation.Text("Hi again."), nil); err != nil {
		t.Fatal(err)
	}
	info, _ := e.Srv.Conversations().Get(c.ID())
	if n := len(info.Messages); n != 2 {
		t.Fatalf("the Company holds %d messages", n)
	}
}

func collectErr(c *conversation.Conversation) []error {
	var out []error
	for _, err := range c.Events(ctx, nil) {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
