package conversation_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// exampleSession starts a fake Company whose Company Agent streams its
// replies, and a Session at it.
func exampleSession(ctx context.Context) (*poppytest.Server, *poppy.Session) {
	company, err := poppytest.New(&poppytest.Options{Conversations: poppytest.ConversationOptions{
		Streaming: true,
		Agent: func(t *poppytest.Turn) {
			if t.Message.Sender == "human" {
				t.Reply(poppytest.Reply{Text: "Medium it is. I've started the exchange.", Deltas: []string{"Medium it is. ", "I've started the exchange."}})
				return
			}
			t.Reply(poppytest.Reply{Text: "Sorry to hear that. Which size?", Deltas: []string{"Sorry to hear that. ", "Which size?"}})
		},
	}})
	if err != nil {
		panic(err)
	}
	key, _ := poppy.GenerateSigningKey()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"}, Keys: []*poppy.SigningKey{key},
	})
	if err != nil {
		log.Fatal(err)
	}
	company.HandleAgent("agent.test", id.Handler(nil))
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{HTTPClient: company.Client(), Clock: company.Clock()})
	if err != nil {
		log.Fatal(err)
	}
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		log.Fatal(err)
	}
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		log.Fatal(err)
	}
	return company, sess
}

// A conversation: the agent's first message, the Company Agent's reply
// streamed in pieces, the User's own words, and the reply to them.
func Example() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	c, err := conversation.Start(ctx, sess, conversation.Text("The jacket from order #1042 isn't warm enough."), nil)
	if err != nil {
		log.Fatal(err)
	}
	turn := func() {
		for ev, err := range c.Events(ctx, nil) {
			if err != nil {
				log.Fatal(err)
			}
			switch ev.Type {
			case conversation.EventTextDelta:
				fmt.Printf("  … %q\n", ev.Delta.Text) // provisional: shown, never acted on
			case conversation.EventMessage:
				fmt.Printf("%s (%s): %s\n", ev.Message.Role, ev.Message.Sender, ev.Message.Text)
			case conversation.EventState:
				if ev.Status == conversation.StatusIdle {
					return // the Company waits for our side
				}
			}
		}
	}
	turn()
	if _, err := c.Send(ctx, conversation.Human("Medium, please."), nil); err != nil {
		log.Fatal(err)
	}
	turn()
	if err := c.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", c.Status())
	// Output:
	// user (agent): The jacket from order #1042 isn't warm enough.
	//   … "Sorry to hear that. "
	//   … "Which size?"
	// company (agent): Sorry to hear that. Which size?
	// user (human): Medium, please.
	//   … "Medium it is. "
	//   … "I've started the exchange."
	// company (agent): Medium it is. I've started the exchange.
	// status: closed
}

// Resume continues a conversation in another process, or from another
// Session of the same User, from the cursor saved in the keystore.
func ExampleResume() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	c, err := conversation.Start(ctx, sess, conversation.Text("Do you have the insulated version?"), nil)
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			log.Fatal(err)
		}
		_ = ev // handled, and the cursor saved
	}
	// Later, or elsewhere: the same conversation, from where it was.
	again, err := conversation.Resume(ctx, sess, c.ID(), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.ID() == c.ID(), again.Cursor() == c.Cursor(), again.Status())
	// Output: true true idle
}

// When the Company asks for the User (user_requested) and the User agrees,
// the Personal Agent opens a Direct Conversation for the User's own words.
func ExampleStartDirect() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	parent, err := conversation.Start(ctx, sess, conversation.Text("The user wants to exchange the jacket."), nil)
	if err != nil {
		log.Fatal(err)
	}
	company.Conversations().RequestUser(parent.ID(), "A specialist needs to confirm the exchange with the customer.")
	for ev, err := range parent.Events(ctx, nil) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Type == conversation.EventUserRequested {
			fmt.Println("the Company asks for the User:", ev.Reason)
			break // ask the User; here, they agree
		}
	}
	direct, err := conversation.StartDirect(ctx, sess, parent.ID(), conversation.Human("Hi, I have a question about the exchange."), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Direct Conversation linked to the parent:", direct.Parent() == parent.ID())
	_, err = parent.Send(ctx, conversation.Text("Meanwhile..."), nil)
	var pe *poppy.Error // the Company's refusal, wherever it arrives
	fmt.Println("the parent takes no messages meanwhile:", errors.As(err, &pe) && pe.Code == "direct_conversation_open")
	// Output:
	// the Company asks for the User: A specialist needs to confirm the exchange with the customer.
	// Direct Conversation linked to the parent: true
	// the parent takes no messages meanwhile: true
}

// Handoff asks for a person at the Company; the status is queued until one
// joins.
func ExampleConversation_Handoff() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	c, err := conversation.Start(ctx, sess, conversation.Text("The user would like to talk to a person."), nil)
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Handoff(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st, c.Responder())
	company.Conversations().JoinHuman(c.ID())
	for ev, err := range c.Events(ctx, nil) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Type == conversation.EventState && ev.Responder == conversation.ResponderHuman {
			break
		}
	}
	fmt.Println(c.Status(), c.Responder())
	// Output:
	// queued agent
	// idle human
}

// After a restart, an app that let the SDK choose its message IDs learns
// from the keystore which of its messages got through, without sending
// any twice: Recover sends what is still pending (starts included), List
// finds every conversation the keystore knows, and Sent says where each
// message stands and its place.
func ExampleList() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	c, err := conversation.Start(ctx, sess, conversation.Text("The jacket from order #1042 isn't warm enough."), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Send(ctx, conversation.Human("Medium, please."), nil); err != nil {
		log.Fatal(err)
	}

	// After a restart (any process sharing the keystore):
	if _, err := conversation.Recover(ctx, sess, nil); err != nil {
		log.Fatal(err)
	}
	convs, err := conversation.List(ctx, sess, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range convs {
		sent, err := c.Sent(ctx)
		if err != nil {
			log.Fatal(err)
		}
		last := sent[len(sent)-1]
		fmt.Printf("%d messages got through; the last is %s, and it is the User's %q: %v\n",
			last.N, last.State, "Medium, please.", last.Same(conversation.Human("Medium, please.")))
	}
	// Output:
	// 2 messages got through; the last is held, and it is the User's "Medium, please.": true
}

// Reading a turn with a checkpoint after every event: after a crash, only
// the event whose handling had not returned comes again. The default
// policy saves after each page or burst, at most 256 events apart.
func ExampleCheckpoint() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	c, err := conversation.Start(ctx, sess, conversation.Text("The jacket from order #1042 isn't warm enough."), nil)
	if err != nil {
		log.Fatal(err)
	}
	opts := &conversation.EventsOptions{UntilIdle: true, Checkpoint: conversation.Checkpoint{Events: 1}}
	for ev, err := range c.Events(ctx, opts) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Type == conversation.EventMessage {
			fmt.Printf("%s: %s\n", ev.Message.Role, ev.Message.Text)
		}
	}
	fmt.Println("status:", c.Status())
	// Output:
	// user: The jacket from order #1042 isn't warm enough.
	// company: Sorry to hear that. Which size?
	// status: idle
}

// An operation a Company Agent proposes in a message (OPS 4.3) arrives as
// an *operations.Operation; with Options.Operations it is that Client's
// view, one operation with what the API and MCP tools propose, to approve
// and confirm as any other (operations.Client.Handle). The message's text
// approves nothing.
func ExampleOptions_operations() {
	ctx := context.Background()
	company, err := poppytest.New(&poppytest.Options{Conversations: poppytest.ConversationOptions{
		Agent: func(t *poppytest.Turn) {
			op, err := t.ProposeOperation("exchange ord_7Hk2", "Exchange the Stormline Jacket (M) for the insulated version, $70 more.", nil)
			if err != nil {
				log.Fatal(err)
			}
			t.Reply(poppytest.Reply{Text: "I can exchange it for $70 more. Shall I?", Operation: op})
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	key, _ := poppy.GenerateSigningKey()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"}, Keys: []*poppy.SigningKey{key},
		Extensions: map[string]string{"operations": "1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	company.HandleAgent("agent.test", id.Handler(nil))
	agent, _ := poppy.NewAgent(id, &poppy.AgentOptions{HTTPClient: company.Client(), Clock: company.Clock()})
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		log.Fatal(err)
	}
	sess, _ := c.Session(ctx, "local-user-42", nil)
	ops, err := operations.New(sess, nil) // with the User's Approver in a real agent
	if err != nil {
		log.Fatal(err)
	}

	conv, err := conversation.Start(ctx, sess, conversation.Text("The jacket is too thin."), &conversation.StartOptions{
		Options: conversation.Options{Operations: ops}})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range conv.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			log.Fatal(err)
		}
		if m := ev.Message; ev.Type == conversation.EventMessage && m.Role == conversation.RoleCompany && m.Operation != nil {
			fmt.Println(m.Text)
			fmt.Println(m.Operation.State, "revision", m.Operation.Revision, "-", m.Operation.Summary)
		}
	}
	// Output:
	// I can exchange it for $70 more. Shall I?
	// proposed revision 1 - Exchange the Stormline Jacket (M) for the insulated version, $70 more.
}
