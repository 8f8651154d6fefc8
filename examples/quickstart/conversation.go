package main

import (
	"context"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
)

// converse holds a short conversation with the fake Company Agent (spec 7):
// the agent's first message, the reply streamed as text-delta pieces shown
// as they arrive, the User's own words, and a close. The fake Company of
// run streams (Options.Conversation.Streaming) and writes its replies in
// pieces (TextDeltas).
func converse(ctx context.Context, step func(string, ...any), sess *poppy.Session) error {
	c, err := conversation.Start(ctx, sess, conversation.Text("The jacket from order #1042 isn't warm enough. The user wants to return it."), nil)
	if err != nil {
		return err
	}
	step("conversation %s started (status %s, responder %s)", c.ID(), c.Status(), c.Responder())
	turn := func() error {
		for ev, err := range c.Events(ctx, nil) { // SSE here; long polls where a Company doesn't stream
			if err != nil {
				return err
			}
			switch ev.Type {
			case conversation.EventTextDelta:
				step("  … %q (text-delta, shown as it arrives, never acted on)", ev.Delta.Text)
			case conversation.EventMessage:
				step("  %s/%s: %s", ev.Message.Role, ev.Message.Sender, ev.Message.Text)
			case conversation.EventState:
				if ev.Status != conversation.StatusWorking {
					return nil // the Company waits for our side
				}
			}
		}
		return nil
	}
	if err := turn(); err != nil {
		return err
	}
	if _, err := c.Send(ctx, conversation.Human("Medium, please."), nil); err != nil {
		return err
	}
	if err := turn(); err != nil {
		return err
	}
	if err := c.Close(ctx); err != nil {
		return err
	}
	step("conversation closed (status %s); its cursor is in the keystore", c.Status())
	return nil
}
