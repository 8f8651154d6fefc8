package conversation_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/poppytest"
)

// TestStreamedEventBounded: a streamed event longer than
// Options.MaxEventBytes ends the loop with a protocol error, after the
// events before it, and moves no cursor past them; one within the bound
// is read.
func TestStreamedEventBounded(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true})
	c := e.start(t, conversation.Text("Hello."), &conversation.StartOptions{Options: conversation.Options{MaxEventBytes: 2048}})
	collect(t, c, &conversation.EventsOptions{LongPoll: true, UntilIdle: true}, nil)
	within := e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "user_requested", "reason": strings.Repeat("a", 1500)})
	e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "user_requested", "reason": strings.Repeat("b", 3000)})
	// A reader without the bound never ends (it reads, fails and
	// reconnects): the deadline makes that a failure, not a hang.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var got []string
	var last error
	for ev, err := range c.Events(rctx, nil) {
		if err != nil {
			last = err
			continue
		}
		got = append(got, ev.ID)
	}
	if !errors.Is(last, conversation.ErrProtocol) || !strings.Contains(last.Error(), "2048 bytes") {
		t.Fatalf("the loop ended with %v, want ErrProtocol for the event over 2048 bytes", last)
	}
	if len(got) != 1 || got[0] != within || c.Cursor() != within {
		t.Fatalf("events %v, cursor %q; want the event within the bound, %q", got, c.Cursor(), within)
	}
}
