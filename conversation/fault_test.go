package conversation_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/poppytest"
)

// TestFaultInjection: a 1,000-message conversation over streams and long
// polls, with streams cut every few events (in the middle of an event too),
// events delivered again after reconnects, lost POST answers, 5xx and 429.
// Every Company event reaches the caller exactly once, and the Company
// holds each message exactly once (PA-7.3-04, PA-7.5-09, PA-7.6-04).
func TestFaultInjection(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	for _, mode := range []string{"stream", "longpoll"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, poppytest.ConversationOptions{Streaming: mode == "stream", TextDeltas: true, PageSize: 7})
			e.Srv.Conversations().SetFaults(poppytest.ConversationFaults{Seed: 42, CutStream: 0.15, CutMidEvent: true, Replay: 3, LosePOST: 0.1})
			// The fake clock moves forward by every sleep, the reader's
			// too: its reconnect backoff (a stream cut before it brought
			// anything new backs off further) would age the sender's proofs
			// past their window. A short MaxBackoff keeps the clock near.
			c := e.start(t, conversation.Text("Message 0"), &conversation.StartOptions{Options: conversation.Options{MaxBackoff: 500 * time.Millisecond}})

			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				count   = map[string]int{}
				readErr error
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ev, err := range c.Events(ctx, &conversation.EventsOptions{LongPoll: mode == "longpoll"}) {
					if err != nil {
						readErr = err
						return
					}
					if ev.Provisional() {
						continue
					}
					mu.Lock()
					count[ev.ID]++
					mu.Unlock()
				}
			}()
			pending := 0
			for i := 1; i < n; i++ {
				if i%97 == 0 {
					e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusBadGateway})
				}
				if i%89 == 0 {
					e.Srv.Faults().RateLimit(poppytest.EndpointConversation, 4, "1")
				}
				_, err := c.Send(ctx, conversation.Text("Message "+itoa(i)), nil)
				// A message whose retries ran out stays in the outbox,
				// and Flush sends it, with its ID.
				for try := 0; isPending(err) && try < 10; try++ {
					pending++
					err = c.Flush(ctx)
				}
				if err != nil {
					t.Fatalf("Send %d: %v", i, err)
				}
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if readErr != nil {
				t.Fatalf("Events: %v", readErr)
			}
			info, _ := e.Srv.Conversations().Get(c.ID())
			// The Company holds each message once, in order.
			if len(info.Messages) != n {
				t.Fatalf("the Company holds %d messages, want %d", len(info.Messages), n)
			}
			seenMsg := map[string]bool{}
			for i, m := range info.Messages {
				if seenMsg[m.ID] || m.Text != "Message "+itoa(i) {
					t.Fatalf("message %d: %q (%s)", i, m.Text, m.ID)
				}
				seenMsg[m.ID] = true
			}
			// Every event reached the caller once.
			if len(count) != len(info.Events) {
				t.Fatalf("%d events delivered, the Company has %d", len(count), len(info.Events))
			}
			for _, raw := range info.Events {
				var ev struct{ ID string }
				json.Unmarshal(raw, &ev)
				if count[ev.ID] != 1 {
					t.Fatalf("event %s delivered %d times", ev.ID, count[ev.ID])
				}
			}
			var cuts, lost int
			for _, r := range e.convRequests() {
				switch {
				case r.ErrorCode == "response_lost" || (r.Method == http.MethodPost && r.Status == 0):
					lost++
				case r.Method == http.MethodGet:
					cuts++
				}
			}
			t.Logf("%s: %d messages, %d events, %d reads or streams, %d lost POST answers, %d sends left pending", mode, n, len(info.Events), cuts, lost, pending)
			if lost == 0 {
				t.Fatal("no POST answer was lost: the faults did not run")
			}
		})
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
