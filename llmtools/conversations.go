package llmtools

// Conversation tools (spec 7) on package conversation: start a
// conversation with the Company Agent, send a message in one, and read
// one. Each call reads the events until the Company is no longer working
// (EventsOptions.UntilIdle, PA-7.7-02), bounded in count and time, and
// returns the Company's messages as plain text; an operation a message
// carries goes through the operations client like a tool result's (OPS 4),
// so the model sees it proposed, never approved. The cursor and outbox are
// the conversation package's, in the keystore.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/poppyproto/poppy/conversation"
)

const (
	// maxReadEvents bounds the events one call reads.
	maxReadEvents = 64
	// readTimeout bounds the time one call waits for the Company's turn.
	readTimeout = 60 * time.Second
	maxConvs    = 64
)

const convIDProp = `"conversation_id":{"type":"string","minLength":1,"maxLength":256,"description":"The conversation's ID, from poppy_start_conversation."}`
const textProp = `"text":{"type":"string","minLength":1,"maxLength":8000,"description":"The message, in natural language, as the Personal Agent's own words."}`

func (k *Toolkit) conversationTools() []*Tool {
	return []*Tool{
		{
			Name: "poppy_start_conversation",
			Description: "Start a conversation with the Company's agent with a first message, and return its ID and the Company's replies " +
				"up to the end of its turn.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{` + domainProp + `,` + textProp + `},"required":["domain","text"],"additionalProperties":false}`),
			run:         k.startConversation,
		},
		{
			Name:        "poppy_send_message",
			Description: "Send a message in a conversation with the Company's agent and return its replies up to the end of its turn.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{` + domainProp + `,` + convIDProp + `,` + textProp + `},"required":["domain","conversation_id","text"],"additionalProperties":false}`),
			run:         k.sendMessage,
		},
		{
			Name:        "poppy_read_conversation",
			Description: "Read what is new in a conversation with the Company's agent, up to the end of its turn.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{` + domainProp + `,` + convIDProp + `},"required":["domain","conversation_id"],"additionalProperties":false}`),
			run:         k.readConversation,
		},
	}
}

type convArgs struct {
	Domain string `json:"domain"`
	ID     string `json:"conversation_id"`
	Text   string `json:"text"`
}

func (k *Toolkit) startConversation(ctx context.Context, args json.RawMessage) (any, error) {
	a, err := decode[convArgs](args)
	if err != nil {
		return nil, err
	}
	c, err := k.company(a.Domain)
	if err != nil {
		return nil, err
	}
	conv, err := conversation.Start(ctx, c.sess, conversation.Text(a.Text), &conversation.StartOptions{Options: k.convOptions(c)})
	if err != nil {
		return nil, err
	}
	k.keepConv(conv)
	return k.readTurn(ctx, c, conv)
}

func (k *Toolkit) sendMessage(ctx context.Context, args json.RawMessage) (any, error) {
	a, err := decode[convArgs](args)
	if err != nil {
		return nil, err
	}
	c, conv, err := k.conv(ctx, a)
	if err != nil {
		return nil, err
	}
	if _, err := conv.Send(ctx, conversation.Text(a.Text), nil); err != nil {
		return nil, err
	}
	return k.readTurn(ctx, c, conv)
}

func (k *Toolkit) readConversation(ctx context.Context, args json.RawMessage) (any, error) {
	a, err := decode[convArgs](args)
	if err != nil {
		return nil, err
	}
	c, conv, err := k.conv(ctx, a)
	if err != nil {
		return nil, err
	}
	return k.readTurn(ctx, c, conv)
}

// conv returns the conversation a names, resumed from the keystore when
// this Toolkit has not seen it.
func (k *Toolkit) conv(ctx context.Context, a convArgs) (*company, *conversation.Conversation, error) {
	c, err := k.company(a.Domain)
	if err != nil {
		return nil, nil, err
	}
	k.mu.Lock()
	conv := k.convs[c.key+"\x00"+a.ID]
	k.mu.Unlock()
	if conv != nil {
		return c, conv, nil
	}
	o := k.convOptions(c)
	conv, err = conversation.Resume(ctx, c.sess, a.ID, &o)
	if conv == nil {
		if err == nil {
			err = errors.New("llmtools: no such conversation")
		}
		return nil, nil, err
	}
	k.keepConv(conv)
	return c, conv, nil
}

// convOptions are the conversation options of c: the operations a message
// carries go through c's operations Client (OPS 4.3), as a tool result's do.
func (k *Toolkit) convOptions(c *company) conversation.Options {
	return conversation.Options{Logger: k.log, Operations: c.ops}
}

func (k *Toolkit) keepConv(conv *conversation.Conversation) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.convs == nil || len(k.convs) >= maxConvs {
		k.convs = map[string]*conversation.Conversation{}
	}
	k.convs[companyKey(conv.Session().Company().Domain())+"\x00"+conv.ID()] = conv
}

// readTurn reads the conversation's events until the Company's turn ends.
func (k *Toolkit) readTurn(ctx context.Context, c *company, conv *conversation.Conversation) (any, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	var msgs []any
	n := 0
	// A long poll: the model gets whole messages, never text-delta pieces
	// (which a stream would bring, each counted against maxReadEvents).
	for ev, err := range conv.Events(rctx, &conversation.EventsOptions{UntilIdle: true, LongPoll: true}) {
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if rctx.Err() != nil {
				break // the Company is still working: read again later
			}
			return nil, err
		}
		if n++; n > maxReadEvents {
			break
		}
		switch ev.Type {
		case conversation.EventMessage:
			m := ev.Message
			if m == nil || m.Role != "company" {
				continue
			}
			out := map[string]any{"id": plain(m.ID, 256), "sender": plain(string(m.Sender), 32), "text": k.text(ctx, m.Text, 8<<10)}
			if len(m.Data) > 0 && len(m.Data) <= 16<<10 {
				out["data"] = m.Data
			}
			switch {
			case m.Operation != nil && c.ops != nil:
				// Observed by the Company's operations Client (convOptions).
				out["operation"], out["approval"] = k.proposed(ctx, c, m.Operation)
			case m.OperationError != nil:
				out["approval"] = "The Company's message held an operation that was refused: " + k.text(ctx, m.OperationError.Error(), 200) + ". Nothing was done."
			}
			msgs = append(msgs, out)
		case conversation.EventAuthorization:
			if ev.Authorization == nil {
				continue
			}
			msgs = append(msgs, map[string]any{"authorization": plain(ev.Authorization.Code, 64), "scope": plain(strings.Join(ev.Authorization.Scope, " "), 256),
				"note": "The Company asks the User to sign in: call poppy_sign_in."})
		}
	}
	return map[string]any{"domain": c.domain, "conversation_id": plain(conv.ID(), 256), "status": string(conv.Status()),
		"responder": string(conv.Responder()), "messages": msgs}, nil
}
