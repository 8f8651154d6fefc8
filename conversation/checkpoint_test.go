package conversation_test

// The checkpoint policy (EventsOptions.Checkpoint): when the cursor is
// saved, that it is never ahead of what the loop body returned from, and,
// in child processes killed in the middle of a loop, that what comes again
// after the crash is what was not checkpointed, each event with its ID.

import (
	"context"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// TestCheckpointEveryNEvents: with Checkpoint.Events 10, a page of 95
// events is saved after events 10, 20, …, 90 and at the page's end; the
// saved cursor is always an event the loop body has returned from
// (PA-7.5-08).
func TestCheckpointEveryNEvents(t *testing.T) {
	store := &countingStore{Store: keystore.NewMemory()}
	e := newEnvWith(t, poppytest.ConversationOptions{Agent: quiet, PageSize: 1000}, &poppy.AgentOptions{Store: store})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	ids := appendMany(e, c.ID(), 95)
	before := store.cursorWrites()
	handled := map[string]bool{savedCursor(t, e, c.ID()): true}
	n := 0
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{LongPoll: true, Checkpoint: conversation.Checkpoint{Events: 10, Interval: time.Hour}}) {
		if err != nil {
			t.Fatal(err)
		}
		// PA-7.5-08: what is saved was handled, never the event in hand.
		if cur := savedCursor(t, e, c.ID()); !handled[cur] {
			t.Fatalf("saved cursor %q while handling event %d: not one handled", cur, n)
		}
		handled[ev.ID] = true
		if n++; ev.ID == ids[len(ids)-1] {
			break
		}
	}
	if w := store.cursorWrites() - before; w != 10 {
		t.Fatalf("%d cursor writes, want 10 (every 10 events, and the page's end)", w)
	}
	if cur := savedCursor(t, e, c.ID()); cur != ids[len(ids)-1] {
		t.Fatalf("saved cursor %q after the loop, want %q", cur, ids[len(ids)-1])
	}
}

// TestCheckpointInterval: with Checkpoint.Interval 1 s and events that
// take 300 ms each to handle (by the fake clock), the cursor is saved
// every fifth event, not only at the page's end.
func TestCheckpointInterval(t *testing.T) {
	store := &countingStore{Store: keystore.NewMemory()}
	e := newEnvWith(t, poppytest.ConversationOptions{Agent: quiet, PageSize: 1000}, &poppy.AgentOptions{Store: store})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	ids := appendMany(e, c.ID(), 50)
	before := store.cursorWrites()
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{LongPoll: true, Checkpoint: conversation.Checkpoint{Events: 1000, Interval: time.Second}}) {
		if err != nil {
			t.Fatal(err)
		}
		e.Srv.Clock().Advance(300 * time.Millisecond)
		if ev.ID == ids[len(ids)-1] {
			break
		}
	}
	// Saved after events 5, 10, …, 50 (at 1.2 s after the first unsaved).
	if w := store.cursorWrites() - before; w < 9 || w > 11 {
		t.Fatalf("%d cursor writes for 50 events of 300 ms, want about 10", w)
	}
}

// TestCheckpointEachEvent: Checkpoint.Events 1 saves after every event.
func TestCheckpointEachEvent(t *testing.T) {
	store := &countingStore{Store: keystore.NewMemory()}
	e := newEnvWith(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true}, &poppy.AgentOptions{Store: store})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	ids := appendMany(e, c.ID(), 40)
	before := store.cursorWrites()
	var prev string
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{Checkpoint: conversation.Checkpoint{Events: 1}}) {
		if err != nil {
			t.Fatal(err)
		}
		// The event before this one is saved already.
		if prev != "" && savedCursor(t, e, c.ID()) != prev {
			t.Fatalf("event %s not saved before the next was yielded", prev)
		}
		prev = ev.ID
		if ev.ID == ids[len(ids)-1] {
			break
		}
	}
	if w := store.cursorWrites() - before; w < 40 {
		t.Fatalf("%d cursor writes for 40 events", w)
	}
}

// TestCheckpointWhenStreamFallsSilent: a stream that stops sending has
// the cursor of the events it brought saved while the loop still waits on
// it, though neither Checkpoint.Events nor Checkpoint.Interval was reached:
// at once after a first burst, and, for a burst that ends soon after a
// save, a little later.
func TestCheckpointWhenStreamFallsSilent(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{LongPoll: true, UntilIdle: true}, nil)
	first := appendMany(e, c.ID(), 2)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// waitSaved reports whether id becomes the saved cursor, within a
	// bound on the wait (should it never be saved).
	waitSaved := func(id string) bool {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if savedCursor(t, e, c.ID()) == id {
				return true
			}
		}
		return false
	}
	done := make(chan bool, 1)
	for ev, err := range c.Events(rctx, &conversation.EventsOptions{Checkpoint: conversation.Checkpoint{Events: 1000, Interval: time.Hour}}) {
		if err != nil {
			break
		}
		if ev.ID == first[1] {
			go func() {
				defer cancel()
				if !waitSaved(first[1]) {
					done <- false
					return
				}
				// A second burst, right after that save.
				second := appendMany(e, c.ID(), 3)
				done <- waitSaved(second[2])
			}()
		}
	}
	if !<-done {
		t.Fatal("the cursor was not saved while the stream was silent")
	}
}
