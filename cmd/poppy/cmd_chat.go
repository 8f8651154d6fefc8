package main

// poppy chat: a conversation with the Company Agent (spec 7), through
// package conversation.
//
// A chatSession holds one run's state. Its main goroutine reads the lines
// the User types (through the run's input, so that Ctrl-C stops the wait)
// and sends them or runs a /command; one events goroutine at a time reads
// the conversation's events (a stream where the Company streams, long
// polls with --no-stream) and shows them as they come: on a terminal,
// text-delta pieces live, then replaced by the full message; elsewhere
// each message once, in full. The cursor and the outbox are in the
// keystore (the SDK's), so "poppy chat DOMAIN --conversation ID" resumes
// after Ctrl-C or a crash. Lines the User types are the User's own words
// (sender "human") unless "/as agent" says otherwise.
//
// When input ends (a script), the chat shows the Company's turn to its end
// before it exits, whenever the input ended: the events goroutine goes on
// until the conversation shows the last message the User sent (every
// message of either side is an event, spec 7.5) and then a state that is
// not "working" (spec 7.7). What a script sees does not depend on how long
// its stdin stays open: one message piped in gets the whole turn, each
// event once, text-delta pieces included in --json.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/signin"
)

const chatHelp = `Commands: /data JSON, /context k=v…, /as agent|human, /handoff, /signin [method] [scope],
/direct [text], /decline [note], /leave, /status, /close, /quit. Anything else is sent as a message.`

// declineNote is the Personal Agent's own words for /decline without a
// note, as conversation.DeclineUserRequest has them.
const declineNote = "The user isn't available to talk with you directly right now. Please continue with me."

type chatOptions struct {
	app            *app
	Domain         string
	ConversationID string
	As             string // "human" or "agent"
	NoStream       bool
}

func newCmdChat(a *app, runF func(context.Context, *chatOptions) error) *cobra.Command {
	opts := &chatOptions{app: a}
	cmd := &cobra.Command{
		Use:   "chat DOMAIN",
		Short: "Talk with the Company's agent in a conversation",
		Long: `chat starts a conversation with the Company Agent, or resumes one with
--conversation ID, and shows its replies as they are written. Type a line to
send it (as your own words, or as the agent's with --as agent).

` + chatHelp + `

When stdin ends (a script), chat shows the Company's reply to the last line
sent, to the end of its turn, then exits. Ctrl-C leaves at once (exit 130);
the conversation resumes with --conversation. With --json, every event is a
JSON line on stdout, and lines on stdin are sent.`,
		Example: `  poppy chat example.com
  poppy chat example.com --conversation cnv_8f3Kd2
  echo "Where is my order?" | poppy --json chat example.com
  poppy chat example.com --as agent --no-stream < questions.txt`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if opts.As != "agent" && opts.As != "human" {
				return usageError{err: errors.New(`poppy: --as must be "agent" or "human"`)}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runChat(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.ConversationID, "conversation", "", "resume the conversation with this ID")
	cmd.Flags().StringVar(&opts.As, "as", "human", `whose words the lines you type are: "human" (yours) or "agent"`)
	cmd.Flags().BoolVar(&opts.NoStream, "no-stream", false, "read replies by long poll instead of a stream")
	return cmd
}

func runChat(ctx context.Context, opts *chatOptions) error {
	c, s, err := opts.app.session(ctx, opts.Domain)
	if err != nil {
		return err
	}
	ch := &chatSession{
		a: opts.app, domain: opts.Domain, company: c, session: s, noStream: opts.NoStream, as: opts.As,
		convOpts: conversation.Options{Logger: opts.app.log},
	}
	// Operations in the Company's messages go through the operations
	// Client, as those of API answers and tool results do (OPS 4).
	if oc, err := operations.New(s, &operations.Options{Logger: opts.app.log}); err == nil {
		ch.convOpts.Operations = oc
	}
	return ch.run(ctx, opts.ConversationID)
}

// chatSession is one run of poppy chat.
type chatSession struct {
	a        *app
	domain   string
	company  *poppy.Company
	session  *poppy.Session
	convOpts conversation.Options
	noStream bool

	// The main goroutine's alone.
	as     string
	conv   *conversation.Conversation
	parent *conversation.Conversation // while a Direct Conversation is open
	events *eventsLoop                // reading conv's events

	// Shared with the events goroutine.
	mu         sync.Mutex
	partial    map[string]int // message ID → bytes of provisional text shown
	authScopes []string       // the scopes the last authorization event asked for
	turn       chatTurn
}

// chatTurn follows the Company's turn after the last message the User
// sent: it ended once that message came back as an event and then a state
// that is not "working".
type chatTurn struct {
	conv, message string // the conversation and the message sent; "" for none
	echoed        bool
	ended         chan struct{} // closed when the turn ended
}

// eventsLoop is the events goroutine of one conversation.
type eventsLoop struct {
	stop context.CancelFunc
	done chan struct{}
}

// eventsFailed is the cause with which the events goroutine ends the
// chat: the conversation's terminal error.
type eventsFailed struct{ err error }

func (e eventsFailed) Error() string { return e.err.Error() }
func (e eventsFailed) Unwrap() error { return e.err }

func (ch *chatSession) run(ctx context.Context, resume string) (err error) {
	a := ch.a
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	defer ch.stopEvents()
	defer func() { err = ch.failure(ctx, err) }()
	if resume != "" {
		conv, err := conversation.Resume(ctx, ch.session, resume, &ch.convOpts)
		if conv == nil {
			return err
		}
		ch.conv = conv
		ch.startEvents(ctx, fail)
	} else if isTerminal(a.in) {
		// A person at a terminal is told what to do; a piped stdin is
		// read as it is, without a word.
		fmt.Fprintln(a.out.prompt(), a.out.dim("Type your first message (/quit to leave)."))
	}
	for {
		line, err := a.in.ReadLine(ctx)
		if errors.Is(err, io.EOF) {
			return ch.endOfInput(ctx)
		}
		if err != nil {
			return err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if ch.conv == nil {
			if strings.HasPrefix(line, "/") {
				if line == "/quit" {
					return nil
				}
				fmt.Fprintln(a.out.prompt(), "Send a message first; then: "+chatHelp)
				continue
			}
			if err := ch.start(ctx, line); err != nil {
				return a.apiError(err, ch.company, ch.domain, nil)
			}
			ch.startEvents(ctx, fail)
			continue
		}
		quit, err := ch.command(ctx, line, fail)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			ch.say(map[string]any{"event": "error", "message": err.Error()}, a.out.bold("error: ")+esc(err.Error()))
		}
		if quit {
			return nil
		}
	}
}

// failure is the error the chat ends with: the conversation's terminal
// error when the events goroutine ended it, else err.
func (ch *chatSession) failure(ctx context.Context, err error) error {
	var ef eventsFailed
	if errors.As(context.Cause(ctx), &ef) {
		return ch.a.apiError(ef.err, ch.company, ch.domain, nil)
	}
	return err
}

// start starts the conversation with its first message.
func (ch *chatSession) start(ctx context.Context, line string) error {
	m := ch.message(line)
	conv, err := conversation.Start(ctx, ch.session, m, &conversation.StartOptions{Options: ch.convOpts})
	if err != nil {
		return err
	}
	ch.conv = conv
	ch.expectTurn(conv.ID(), m.ID)
	return nil
}

// send sends m in the current conversation; its turn is what the end of
// input waits for.
func (ch *chatSession) send(ctx context.Context, m conversation.Message) error {
	if m.ID == "" {
		m.ID = conversation.NewMessageID()
	}
	ch.expectTurn(ch.conv.ID(), m.ID)
	if _, err := ch.conv.Send(ctx, m, nil); err != nil {
		// Perhaps never sent: the end of input reads up to idle instead.
		ch.expectTurn("", "")
		return err
	}
	return nil
}

func (ch *chatSession) expectTurn(conv, message string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.turn = chatTurn{conv: conv, message: message, ended: make(chan struct{})}
}

// startEvents starts the events goroutine of ch.conv, after stopping the
// one before (a /direct or /leave switches conversations). A terminal
// error of the conversation ends the chat through fail.
func (ch *chatSession) startEvents(ctx context.Context, fail context.CancelCauseFunc) {
	ch.stopEvents()
	conv := ch.conv
	ch.say(map[string]any{"event": "started", "conversation_id": conv.ID()}, "Conversation "+esc(conv.ID())+
		" (resume: "+ch.a.cmdline("chat", shellQuote(ch.domain), "--conversation", shellQuote(conv.ID()))+")")
	lctx, stop := context.WithCancel(ctx)
	l := &eventsLoop{stop: stop, done: make(chan struct{})}
	ch.events = l
	go func() {
		defer close(l.done)
		for ev, err := range conv.Events(lctx, &conversation.EventsOptions{LongPoll: ch.noStream}) {
			if err != nil {
				if lctx.Err() == nil {
					fail(eventsFailed{err})
				}
				return
			}
			ch.event(ctx, conv.ID(), ev)
		}
	}()
}

// stopEvents stops the events goroutine and waits for it: the cursor of
// the last event shown is saved by then.
func (ch *chatSession) stopEvents() {
	if ch.events != nil {
		ch.events.stop()
		<-ch.events.done
		ch.events = nil
	}
}

// endOfInput sends what is pending and shows the Company's turn to its
// end.
func (ch *chatSession) endOfInput(ctx context.Context) error {
	if ch.conv == nil {
		return nil
	}
	if err := ch.conv.Flush(ctx); err != nil {
		return err
	}
	ch.mu.Lock()
	t := ch.turn
	ch.mu.Unlock()
	if t.message != "" && t.conv == ch.conv.ID() && ch.events != nil {
		select {
		case <-t.ended:
			return nil // the deferred stopEvents saves the cursor
		case <-ch.events.done:
			// The conversation closed, or failed (run returns the error).
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ch.stopEvents()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Nothing was sent in this run, or the reading ended: what is left,
	// up to the end of the Company's turn.
	for ev, err := range ch.conv.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			return ch.a.apiError(err, ch.company, ch.domain, nil)
		}
		ch.event(ctx, ch.conv.ID(), ev)
	}
	return nil
}

// say prints one thing: a JSON line with --json, else text.
func (ch *chatSession) say(j map[string]any, text string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.a.out.emit(j)
	ch.a.out.printf("%s\n", text)
}

func (ch *chatSession) message(text string) conversation.Message {
	m := conversation.Human(text)
	if ch.as == "agent" {
		m = conversation.Text(text)
	}
	m.ID = conversation.NewMessageID()
	return m
}

// event shows one event of the conversation in. In JSON each carries "in", so
// that a reader tells the events of a Direct Conversation from those of the
// conversation with the Company's agent.
func (ch *chatSession) event(ctx context.Context, in string, ev conversation.Event) {
	a, o := ch.a, ch.a.out
	switch ev.Type {
	case conversation.EventTextDelta:
		ch.mu.Lock()
		defer ch.mu.Unlock()
		o.emit(map[string]any{"in": in, "event": "text-delta", "message_id": ev.Delta.MessageID, "text": ev.Delta.Text})
		if !o.tty {
			return // the full message follows; shown once
		}
		if ch.partial == nil {
			ch.partial = map[string]int{}
		}
		if _, ok := ch.partial[ev.Delta.MessageID]; !ok {
			o.printf("%s ", o.bold("company:"))
		}
		ch.partial[ev.Delta.MessageID] += len(ev.Delta.Text)
		o.printf("%s", o.dim(esc(ev.Delta.Text)))
	case conversation.EventPartialDropped:
		ch.mu.Lock()
		_, shown := ch.partial[ev.Delta.MessageID]
		delete(ch.partial, ev.Delta.MessageID)
		o.emit(map[string]any{"in": in, "event": "partial-dropped", "message_id": ev.Delta.MessageID})
		if shown {
			o.printf("\n%s\n", o.dim("(the reply being written was cut off; it will come again in full)"))
		}
		ch.mu.Unlock()
	case conversation.EventMessage:
		m := ev.Message
		ch.mu.Lock()
		if _, ok := ch.partial[m.ID]; ok {
			delete(ch.partial, m.ID)
			o.printf("\r\x1b[2K") // on a terminal: the full message replaces the pieces
		}
		if m.Role == conversation.RoleUser && in == ch.turn.conv && m.ID == ch.turn.message {
			ch.turn.echoed = true
		}
		ch.mu.Unlock()
		who := string(m.Role)
		if m.Role != conversation.RoleUser {
			who = "company"
		}
		if m.Sender != "" && m.Role == conversation.RoleUser {
			who = "you (" + string(m.Sender) + ")"
		} else if m.Sender != "" {
			who = "company (" + string(m.Sender) + ")"
		}
		j := map[string]any{"in": in, "event": "message", "id": ev.ID, "message": m}
		text := o.bold(esc(who)+":") + " " + esc(m.Text)
		if len(m.Data) > 0 {
			text += "\n  data: " + esc(string(m.Data))
		}
		if op := m.Operation; op != nil && m.Role != conversation.RoleUser {
			// Observed by the chat's operations Client (convOpts).
			a.rememberProposed(ctx, ch.domain, op, operations.ConversationAction())
			next := a.cmdline("ops", "confirm", shellQuote(ch.domain), shellQuote(op.ID))
			j["next"] = next
			text += "\n" + o.bold("Proposed — not done until you approve:") + " " + esc(op.Summary) + "\n  To review and approve it: " + next
		}
		if m.OperationError != nil {
			j["operation_error"] = m.OperationError.Error()
			text += "\n" + o.dim("(the message carried an operation that could not be used: "+esc(m.OperationError.Error())+")")
		}
		ch.say(j, text)
	case conversation.EventState:
		ch.say(map[string]any{"in": in, "event": "state", "id": ev.ID, "status": ev.Status, "responder": ev.Responder},
			o.dim(fmt.Sprintf("(%s, answered by %s)", esc(string(ev.Status)), esc(string(ev.Responder)))))
		ch.mu.Lock()
		if t := ch.turn; t.echoed && in == t.conv && ev.Status != conversation.StatusWorking {
			close(t.ended) // PA-7.7-02: the Company's turn is over
			ch.turn.echoed = false
		}
		ch.mu.Unlock()
	case conversation.EventAuthorization:
		ch.mu.Lock()
		ch.authScopes = append([]string(nil), ev.Authorization.Scope...)
		ch.mu.Unlock()
		next := a.signInHint(ev.Authorization, nil, ch.domain, ev.Authorization.Scope).(*hintError).hint
		ch.say(map[string]any{"in": in, "event": "authorization", "id": ev.ID, "code": ev.Authorization.Code, "scope": ev.Authorization.Scope, "next": next},
			o.bold("The Company needs you signed in")+" ("+esc(strings.Join(ev.Authorization.Scope, " "))+"): /signin, or in another terminal "+esc(next))
	case conversation.EventUserRequested:
		ch.say(map[string]any{"in": in, "event": "user_requested", "id": ev.ID, "reason": ev.Reason},
			o.bold("The Company asks to talk with you directly")+": "+esc(ev.Reason)+"\n  /decline [note] to say no")
	case conversation.EventDirectOpened, conversation.EventDirectClosed:
		ch.say(map[string]any{"in": in, "event": string(ev.Type), "id": ev.ID, "conversation_id": ev.ConversationID},
			o.dim("("+string(ev.Type)+": "+esc(ev.ConversationID)+")"))
	case conversation.EventHistoryGap:
		ch.say(map[string]any{"in": in, "event": "history-gap"}, o.bold("Part of the conversation's history is gone")+" (the Company no longer keeps it).")
	}
}

// command runs a /command, or sends the line.
func (ch *chatSession) command(ctx context.Context, line string, fail context.CancelCauseFunc) (quit bool, err error) {
	cmd, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch cmd {
	case "/quit":
		return true, ch.conv.Flush(ctx)
	case "/close":
		if err := ch.conv.Close(ctx); err != nil {
			return false, err
		}
		ch.say(map[string]any{"event": "closed", "conversation_id": ch.conv.ID()}, "Conversation closed.")
		return true, nil
	case "/status":
		ch.say(map[string]any{"event": "status", "conversation_id": ch.conv.ID(), "status": ch.conv.Status(), "responder": ch.conv.Responder(), "cursor_saved": ch.conv.Cursor() != ""},
			fmt.Sprintf("Conversation %s: %s, answered by %s", esc(ch.conv.ID()), esc(string(ch.conv.Status())), esc(string(ch.conv.Responder()))))
		return false, nil
	case "/as":
		if rest != "agent" && rest != "human" {
			return false, errors.New(`poppy: /as agent or /as human`)
		}
		ch.as = rest
		return false, nil
	case "/handoff":
		st, err := ch.conv.Handoff(ctx)
		if err == nil {
			ch.say(map[string]any{"event": "handoff", "status": st}, "Asked for a person ("+esc(string(st))+").")
		}
		return false, err
	case "/direct":
		// The User agreed to talk with the Company (PA-7.10-04): their own
		// words, in a Direct Conversation linked to this one.
		if ch.parent != nil {
			return false, errors.New("poppy: already in a Direct Conversation; /leave first")
		}
		if rest == "" {
			rest = "Hello."
		}
		m := conversation.Human(rest)
		m.ID = conversation.NewMessageID()
		d, err := conversation.StartDirect(ctx, ch.session, ch.conv.ID(), m, &conversation.StartOptions{Options: ch.convOpts})
		if err != nil {
			return false, err
		}
		ch.parent = ch.conv
		ch.say(map[string]any{"event": "direct", "conversation_id": d.ID(), "parent": ch.parent.ID()}, "You are talking with the Company directly; /leave to go back.")
		ch.conv = d
		ch.expectTurn(d.ID(), m.ID)
		ch.startEvents(ctx, fail)
		return false, nil
	case "/leave":
		if ch.parent == nil {
			return false, errors.New("poppy: not in a Direct Conversation")
		}
		if err := ch.conv.Close(ctx); err != nil {
			return false, err
		}
		p := ch.parent
		ch.parent = nil
		ch.say(map[string]any{"event": "left", "conversation_id": ch.conv.ID()}, "Direct Conversation closed; back with the Company's agent.")
		ch.conv = p
		ch.expectTurn("", "")
		ch.startEvents(ctx, fail)
		return false, nil
	case "/decline":
		// What DeclineUserRequest sends (spec 7.10, PA-7.10-05), through
		// send so that the end of input waits for the Company's answer.
		if rest == "" {
			rest = declineNote
		}
		return false, ch.send(ctx, conversation.Text(rest))
	case "/signin":
		return false, ch.signIn(ctx, strings.Fields(rest))
	case "/data":
		var obj map[string]any
		if err := json.Unmarshal([]byte(rest), &obj); err != nil {
			return false, errors.New("poppy: /data takes a JSON object")
		}
		return false, ch.send(ctx, conversation.Data("", json.RawMessage(rest)))
	case "/context":
		cx := conversation.Context{Extra: map[string]any{}}
		for _, kv := range strings.Fields(rest) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return false, errors.New("poppy: /context k=v…")
			}
			switch k {
			case "locale":
				cx.Locale = v
			case "time_zone":
				cx.TimeZone = v
			case "user_available":
				cx.UserAvailable = conversation.Available(v == "true")
			default:
				cx.Extra[k] = v
			}
		}
		return false, ch.send(ctx, conversation.UpdateContext(cx))
	}
	if strings.HasPrefix(cmd, "/") {
		return false, errors.New("poppy: unknown command " + cmd + ". " + chatHelp)
	}
	return false, ch.send(ctx, ch.message(line))
}

// signIn runs /signin [method] [scope…]: Device, Direct or Mediated
// Sign-In right here (the conversation goes on with the new token, spec
// 7.11). Mediated Sign-In reads the credentials from the next lines of the
// run's input, the same the chat reads its lines from, so no line is lost
// between the chat and the prompter; secrets are read without echo on a
// terminal.
func (ch *chatSession) signIn(ctx context.Context, f []string) error {
	a := ch.a
	method := "device"
	if len(f) > 0 {
		method, f = f[0], f[1:]
	}
	scopes := f
	if len(scopes) == 0 {
		ch.mu.Lock()
		scopes = append([]string(nil), ch.authScopes...)
		ch.mu.Unlock()
	}
	if len(scopes) == 0 {
		scopes = []string{"poppy:read"}
	}
	opts := &poppy.SignInOptions{Scopes: scopes}
	if res, ok, err := ch.session.UseAccountToken(ctx, opts); err != nil {
		return err
	} else if ok {
		return a.reportSignIn(ch.company, method, res)
	}
	p := &cliPrompter{a: a, Terminal: signin.TerminalPrompter(a.out.prompt(), a.in)}
	defer p.stopCountdown()
	var res *poppy.SignInResult
	var err error
	switch method {
	case "mediated":
		res, err = signin.Mediated(ctx, ch.session, opts, p)
	case "device":
		res, err = signin.Device(ctx, ch.session, opts, p)
	case "direct":
		a.checkIdentityServed(ctx)
		var d *signin.Direct
		if d, err = signin.NewDirect(a.agent, nil); err == nil {
			res, err = d.SignIn(ctx, ch.session, opts, p)
		}
	default:
		return fmt.Errorf("unknown sign-in method %q: use device, direct or mediated", method)
	}
	p.stopCountdown()
	if err != nil {
		return a.signInError(err, ch.company, method)
	}
	return a.reportSignIn(ch.company, method, res)
}
