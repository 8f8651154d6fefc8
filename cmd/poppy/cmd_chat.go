package main

// poppy chat: a conversation with the Company Agent (spec 7), through
// package conversation. One goroutine reads the conversation's events
// (a stream where the Company streams, long polls with --no-stream) and
// prints them as they come: text-delta pieces live, replaced by the full
// message; the main loop reads the User's lines and sends them, or runs a
// /command. The cursor and the outbox are in the keystore (the SDK's), so
// "poppy chat DOMAIN --conversation ID" resumes after Ctrl-C or a crash.
// Lines the User types are the User's own words (sender "human") unless
// "/as agent" says otherwise.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/signin"
)

const chatHelp = `Commands: /data JSON, /context k=v…, /as agent|human, /handoff, /signin [method] [scope],
/direct [text], /decline [note], /leave, /status, /close, /quit. Anything else is sent as a message.`

func addChatCommand(root *cobra.Command, a *app) {
	var convID, as string
	var noStream bool
	cmd := &cobra.Command{
		Use:   "chat DOMAIN",
		Short: "Talk with the Company's agent in a conversation",
		Long: `chat starts a conversation with the Company Agent, or resumes one with
--conversation ID, and shows its replies as they are written. Type a line to
send it (as your own words, or as the agent's with --as agent).

` + chatHelp + `

With --json, every event is a JSON line on stdout, and lines on stdin are sent.`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			if as != "agent" && as != "human" {
				return usageError{errors.New(`poppy: --as must be "agent" or "human"`)}
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			c, s, err := a.session(ctx, args[0])
			if err != nil {
				return err
			}
			ch := &chat{a: a, domain: args[0], as: as}
			opts := conversation.Options{Logger: a.log, LongPoll: noStream}
			lines := bufio.NewScanner(io.LimitReader(a.stdin, 1<<30))
			lines.Buffer(make([]byte, 64<<10), 64<<10)
			if convID != "" {
				if ch.conv, err = conversation.Resume(ctx, s, convID, &opts); err != nil && ch.conv == nil {
					return err
				}
			}
			if ch.conv == nil {
				fmt.Fprintln(a.out.prompt(), a.out.dim("Type your first message ("+"/quit to leave)."))
			}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			var evCancel context.CancelFunc = func() {}
			defer func() { evCancel() }()
			readErr := make(chan error, 1)
			// startEvents reads ch.conv's events until the next switch
			// (/direct, /leave) or the end.
			startEvents := func() {
				evCancel()
				wg.Wait()
				var evCtx context.Context
				evCtx, evCancel = context.WithCancel(ctx)
				conv := ch.conv
				ch.say("event", map[string]any{"event": "started", "conversation_id": conv.ID()}, "Conversation "+esc(conv.ID())+
					" (resume: "+a.cmdline("chat", shellQuote(args[0]), "--conversation", shellQuote(conv.ID()))+")")
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ev, err := range conv.Events(evCtx, &conversation.EventsOptions{LongPoll: noStream}) {
						if err != nil {
							if evCtx.Err() == nil {
								readErr <- err
								cancel()
							}
							return
						}
						ch.event(ctx, conv, ev)
					}
				}()
			}
			ch.switchTo = func(to *conversation.Conversation) {
				ch.conv = to
				startEvents()
			}
			ch.session, ch.opts, ch.lines = s, opts, lines
			if ch.conv != nil {
				startEvents()
			}
			for lines.Scan() {
				line := strings.TrimSpace(lines.Text())
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
					if ch.conv, err = conversation.Start(ctx, s, ch.message(line), &conversation.StartOptions{Options: opts}); err != nil {
						return a.apiError(err, c, args[0], nil)
					}
					startEvents()
					continue
				}
				quit, err := ch.command(ctx, line)
				if err != nil {
					ch.say("error", map[string]any{"event": "error", "message": err.Error()}, a.out.bold("error: ")+esc(err.Error()))
				}
				if quit {
					return nil
				}
			}
			select {
			case err := <-readErr:
				return a.apiError(err, c, args[0], nil)
			default:
			}
			if ch.conv != nil {
				// End of input: what was sent goes out, and the replies up
				// to the Company's turn's end are shown.
				if err := ch.conv.Flush(ctx); err != nil {
					return err
				}
				evCancel()
				wg.Wait()
				for ev, err := range ch.conv.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
					if err != nil {
						return a.apiError(err, c, args[0], nil)
					}
					ch.event(ctx, ch.conv, ev)
				}
			}
			return lines.Err()
		},
	}
	cmd.Flags().StringVar(&convID, "conversation", "", "resume the conversation with this ID")
	cmd.Flags().StringVar(&as, "as", "human", `whose words the lines you type are: "human" (yours) or "agent"`)
	cmd.Flags().BoolVar(&noStream, "no-stream", false, "read replies by long poll instead of a stream")
	root.AddCommand(cmd)
}

type chat struct {
	a      *app
	domain string
	as     string
	conv   *conversation.Conversation

	mu      sync.Mutex
	partial map[string]int // message ID → bytes of provisional text shown

	session  *poppy.Session
	opts     conversation.Options
	parent   *conversation.Conversation // while a Direct Conversation is open
	switchTo func(*conversation.Conversation)
	// authScopes are the scopes the last authorization event asked for.
	authScopes []string
	// lines reads what the User types.
	lines *bufio.Scanner
}

// signIn runs /signin [method] [scope…]: Device, Direct or Mediated
// Sign-In right here (the conversation goes on with the new token, spec
// 7.11). Mediated Sign-In reads the credentials from the lines the User
// types next, through the chat's own line reader (chatLines), so no line is
// lost between the chat and the prompter; secrets are read without echo on
// a terminal.
func (ch *chat) signIn(ctx context.Context, f []string) error {
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
		return a.reportSignIn(ch.session.Company(), method, res)
	}
	p := &cliPrompter{a: a, Terminal: signin.TerminalPrompter(a.out.prompt(), ch.promptInput())}
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
		return err
	}
	return a.reportSignIn(ch.session.Company(), method, res)
}

// say prints one thing: a JSON line with --json, else text.
func (ch *chat) say(_ string, j map[string]any, text string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.a.out.emit(j)
	ch.a.out.printf("%s\n", text)
}

func (ch *chat) message(text string) conversation.Message {
	if ch.as == "agent" {
		return conversation.Text(text)
	}
	return conversation.Human(text)
}

// event shows one event of conv. In JSON each carries "in", conv's ID, so
// that a reader tells the events of a Direct Conversation from those of the
// conversation with the Company's agent.
func (ch *chat) event(ctx context.Context, conv *conversation.Conversation, ev conversation.Event) {
	in := conv.ID()
	a, o := ch.a, ch.a.out
	switch ev.Type {
	case conversation.EventTextDelta:
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if ch.partial == nil {
			ch.partial = map[string]int{}
		}
		o.emit(map[string]any{"in": in, "event": "text-delta", "message_id": ev.Delta.MessageID, "text": ev.Delta.Text})
		if _, ok := ch.partial[ev.Delta.MessageID]; !ok {
			o.printf("%s ", o.bold("company:"))
		}
		ch.partial[ev.Delta.MessageID] += len(ev.Delta.Text)
		o.printf("%s", o.dim(esc(ev.Delta.Text)))
	case conversation.EventPartialDropped:
		ch.mu.Lock()
		delete(ch.partial, ev.Delta.MessageID)
		o.emit(map[string]any{"in": in, "event": "partial-dropped", "message_id": ev.Delta.MessageID})
		o.printf("\n%s\n", o.dim("(the reply being written was cut off; it will come again in full)"))
		ch.mu.Unlock()
	case conversation.EventMessage:
		m := ev.Message
		ch.mu.Lock()
		if _, ok := ch.partial[m.ID]; ok {
			delete(ch.partial, m.ID)
			if o.tty {
				o.printf("\r\x1b[2K") // the full message replaces the pieces
			} else {
				o.printf("\n")
			}
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
		if m.Operation != nil && m.Role != conversation.RoleUser {
			if op, err := operations.Parse(m.Operation); err == nil {
				a.rememberOp(ctx, ch.domain, op, &[]operations.Action{operations.ConversationAction()}[0])
				next := a.cmdline("ops", "confirm", shellQuote(ch.domain), shellQuote(op.ID))
				j["next"] = next
				text += "\n" + o.bold("Proposed — not done until you approve:") + " " + esc(op.Summary) + "\n  To review and approve it: " + next
			}
		}
		ch.say("", j, text)
	case conversation.EventState:
		ch.say("", map[string]any{"in": in, "event": "state", "id": ev.ID, "status": ev.Status, "responder": ev.Responder},
			o.dim(fmt.Sprintf("(%s, answered by %s)", esc(string(ev.Status)), esc(string(ev.Responder)))))
	case conversation.EventAuthorization:
		ch.mu.Lock()
		ch.authScopes = append([]string(nil), ev.Authorization.Scope...)
		ch.mu.Unlock()
		next := a.signInHint(ev.Authorization, nil, ch.domain, ev.Authorization.Scope).(*hintError).hint
		ch.say("", map[string]any{"in": in, "event": "authorization", "id": ev.ID, "code": ev.Authorization.Code, "scope": ev.Authorization.Scope, "next": next},
			o.bold("The Company needs you signed in")+" ("+esc(strings.Join(ev.Authorization.Scope, " "))+"): /signin, or in another terminal "+esc(next))
	case conversation.EventUserRequested:
		ch.say("", map[string]any{"in": in, "event": "user_requested", "id": ev.ID, "reason": ev.Reason},
			o.bold("The Company asks to talk with you directly")+": "+esc(ev.Reason)+"\n  /decline [note] to say no")
	case conversation.EventDirectOpened, conversation.EventDirectClosed:
		ch.say("", map[string]any{"in": in, "event": string(ev.Type), "id": ev.ID, "conversation_id": ev.ConversationID},
			o.dim("("+string(ev.Type)+": "+esc(ev.ConversationID)+")"))
	case conversation.EventHistoryGap:
		ch.say("", map[string]any{"in": in, "event": "history-gap"}, o.bold("Part of the conversation's history is gone")+" (the Company no longer keeps it).")
	}
}

// command runs a /command, or sends the line.
func (ch *chat) command(ctx context.Context, line string) (quit bool, err error) {
	cmd, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch cmd {
	case "/quit":
		return true, ch.conv.Flush(ctx)
	case "/close":
		if err := ch.conv.Close(ctx); err != nil {
			return false, err
		}
		ch.say("", map[string]any{"event": "closed", "conversation_id": ch.conv.ID()}, "Conversation closed.")
		return true, nil
	case "/status":
		ch.say("", map[string]any{"event": "status", "conversation_id": ch.conv.ID(), "status": ch.conv.Status(), "responder": ch.conv.Responder(), "cursor_saved": ch.conv.Cursor() != ""},
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
			ch.say("", map[string]any{"event": "handoff", "status": st}, "Asked for a person ("+esc(string(st))+").")
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
		d, err := conversation.StartDirect(ctx, ch.session, ch.conv.ID(), conversation.Human(rest), &conversation.StartOptions{Options: ch.opts})
		if err != nil {
			return false, err
		}
		ch.parent = ch.conv
		ch.say("", map[string]any{"event": "direct", "conversation_id": d.ID(), "parent": ch.parent.ID()}, "You are talking with the Company directly; /leave to go back.")
		ch.switchTo(d)
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
		ch.say("", map[string]any{"event": "left", "conversation_id": ch.conv.ID()}, "Direct Conversation closed; back with the Company's agent.")
		ch.switchTo(p)
		return false, nil
	case "/decline":
		_, err := ch.conv.DeclineUserRequest(ctx, rest)
		return false, err
	case "/signin":
		return false, ch.signIn(ctx, strings.Fields(rest))
	case "/data":
		var obj map[string]any
		if err := json.Unmarshal([]byte(rest), &obj); err != nil {
			return false, errors.New("poppy: /data takes a JSON object")
		}
		_, err := ch.conv.Send(ctx, conversation.Data("", json.RawMessage(rest)), nil)
		return false, err
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
		_, err := ch.conv.Send(ctx, conversation.UpdateContext(cx), nil)
		return false, err
	}
	if strings.HasPrefix(cmd, "/") {
		return false, errors.New("poppy: unknown command " + cmd + ". " + chatHelp)
	}
	_, err = ch.conv.Send(ctx, ch.message(line), nil)
	return false, err
}

// promptInput is what a prompter inside the chat reads the User's answers
// from. On a terminal in canonical mode a read returns one line at a time,
// so the chat's scanner holds nothing beyond the line it handed out and the
// terminal itself is passed (its no-echo mode hides secrets). Otherwise
// (a pipe, a script) the answers are the scanner's next lines.
func (ch *chat) promptInput() io.Reader {
	if f, ok := ch.a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return f
	}
	return &chatLines{s: ch.lines}
}

// chatLines reads the chat's scanner line by line as an io.Reader.
type chatLines struct {
	s   *bufio.Scanner
	buf []byte
}

func (r *chatLines) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.s == nil || !r.s.Scan() {
			if r.s != nil && r.s.Err() != nil {
				return 0, r.s.Err()
			}
			return 0, io.EOF
		}
		r.buf = append(append([]byte(nil), r.s.Bytes()...), '\n')
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
