package convcrash

// The checkpoint policy across a crash (conversation.EventsOptions.Checkpoint):
// child processes killed in the middle of an Events loop, and what comes
// again after the crash.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// quiet is a Company Agent that says nothing: the test scripts the events.
func quiet(*poppytest.Turn) {}

// The child of CheckpointCrash: it reads the conversation from its
// saved cursor with a policy, writes each event ID it is given to a file,
// and dies (os.Exit: no deferred save) in the loop body of event number
// readChildCrashAt, before returning from it.
const (
	readChildEnv     = "CONVERSATION_READ_CHILD" // "stream" or "longpoll"
	readChildCrashAt = "CONVERSATION_READ_CRASH_AT"
	readChildEvery   = "CONVERSATION_READ_EVERY"
)

func readChildMain(open func(dir string) (Store, error)) {
	if err := readChild(open); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func readChild(open func(dir string) (Store, error)) error {
	ctx := context.Background()
	dir := os.Getenv(EnvDir)
	jwk, err := os.ReadFile(filepath.Join(dir, "key.jwk"))
	if err != nil {
		return err
	}
	store, err := open(dir)
	if err != nil {
		return err
	}
	defer store.Close()
	agent, err := testenv.ChildAgent(jwk, nil, store, nil)
	if err != nil {
		return err
	}
	co, err := agent.Company(ctx, "example.test")
	if err != nil {
		return err
	}
	sess, err := co.Session(ctx, "alice", nil)
	if err != nil {
		return err
	}
	c, err := conversation.Resume(ctx, sess, os.Getenv(EnvConv), nil)
	if err != nil {
		return err
	}
	crashAt, _ := strconv.Atoi(os.Getenv(readChildCrashAt))
	every, _ := strconv.Atoi(os.Getenv(readChildEvery))
	out, err := os.OpenFile(filepath.Join(dir, "yielded-"+os.Getenv(readChildCrashAt)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	n := 0
	opts := &conversation.EventsOptions{LongPoll: os.Getenv(readChildEnv) == "longpoll", Checkpoint: conversation.Checkpoint{Events: every, Interval: time.Hour}}
	for ev, err := range c.Events(ctx, opts) {
		if err != nil {
			return err
		}
		if ev.ID == "" {
			continue
		}
		if _, err := out.WriteString(ev.ID + "\n"); err != nil {
			return err
		}
		if n++; n == crashAt {
			os.Exit(Code) // in the loop body: this event is in flight
		}
	}
	return out.Close()
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// CheckpointCrash: a child reading a 600-event conversation with
// Checkpoint.Events 50 (and another with 1) is killed in the loop body of
// event 437; a second child reads on from the cursor on disk (the store
// open gives, which ChildMain's open must give too). The second yields
// nothing the saved cursor covers, and again exactly the events after it
// up to the one in flight, each with its ID: at most 50 (exactly 1 with a
// checkpoint per event). Nothing is lost. The test binary's
// TestMain must call ChildMain.
func CheckpointCrash(t *testing.T, open func(dir string) (Store, error)) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, tc := range []struct {
		mode  string
		every int
	}{{"stream", 50}, {"longpoll", 50}, {"stream", 1}} {
		t.Run(tc.mode+"/every="+strconv.Itoa(tc.every), func(t *testing.T) {
			srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: quiet, Streaming: tc.mode == "stream", PageSize: 1000}})
			id, key := testenv.NewIdentity(t, nil)
			srv.HandleAgent("agent.test", id.Handler(nil))
			dir := t.TempDir()
			jwk, err := key.MarshalPrivateJWK()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "key.jwk"), jwk, 0o600); err != nil {
				t.Fatal(err)
			}
			RunChild(t, srv, dir, "start", "", "")
			conv := srv.Conversations().All()[0].ID
			for i := range 600 {
				srv.Conversations().Append(conv, map[string]any{"type": "user_requested", "reason": strconv.Itoa(i)})
			}
			srv.Conversations().Close(conv)
			all := srv.Conversations().All()[0].Events
			var order []string
			for _, raw := range all {
				var ev struct{ ID string }
				json.Unmarshal(raw, &ev)
				order = append(order, ev.ID)
			}

			const crashAt = 437
			run := func(at int) int {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(append(os.Environ(), srv.Env()...), readChildEnv+"="+tc.mode, EnvDir+"="+dir, EnvConv+"="+conv,
					readChildCrashAt+"="+strconv.Itoa(at), readChildEvery+"="+strconv.Itoa(tc.every))
				out, err := cmd.CombinedOutput()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if code != 0 && code != Code {
					t.Fatalf("child: exit %d\n%s", code, out)
				}
				return code
			}
			if code := run(crashAt); code != Code {
				t.Fatalf("the child did not crash: %d", code)
			}
			first := readLines(t, filepath.Join(dir, "yielded-"+strconv.Itoa(crashAt)))
			store, err := open(dir)
			if err != nil {
				t.Fatal(err)
			}
			keys, err := store.List(context.Background(), keystore.KindCursor, "alice", srv.Issuer())
			if err != nil || len(keys) != 1 {
				t.Fatalf("records %v, %v", keys, err)
			}
			b, err := store.Get(context.Background(), keys[0])
			store.Close()
			if err != nil {
				t.Fatal(err)
			}
			var rec struct{ Cursor string }
			json.Unmarshal(b, &rec)
			saved := slices.Index(order, rec.Cursor)
			if saved < 0 {
				t.Fatalf("saved cursor %q is not an event", rec.Cursor)
			}
			inFlight := slices.Index(order, first[len(first)-1])

			if code := run(0); code != 0 {
				t.Fatalf("second child: exit %d", code)
			}
			second := readLines(t, filepath.Join(dir, "yielded-0"))
			// Nothing the saved cursor covers comes again: the second
			// child starts right after it.
			if len(second) == 0 || second[0] != order[saved+1] {
				t.Fatalf("saved cursor at event %d; the second child began with %v", saved, second[:min(len(second), 1)])
			}
			// Again: the events after the checkpoint up to the one in
			// flight, no more than the policy allows.
			again := 0
			for _, id := range second {
				if slices.Contains(first, id) {
					again++
				}
			}
			if again != inFlight-saved || again < 1 || again > tc.every {
				t.Fatalf("checkpoint at event %d, crash at %d: %d events came again (every %d)", saved, inFlight, again, tc.every)
			}
			// Nothing lost, nothing twice within a process.
			seen := map[string]int{}
			for _, id := range append(slices.Clone(first), second...) {
				seen[id]++
			}
			for _, id := range order {
				if seen[id] == 0 {
					t.Fatalf("event %s lost", id)
				}
			}
			if len(slices.Compact(slices.Sorted(slices.Values(first)))) != len(first) || len(slices.Compact(slices.Sorted(slices.Values(second)))) != len(second) {
				t.Fatal("an event yielded twice in one process")
			}
			t.Logf("%s, every %d: saved at event %d of %d, crashed at %d, %d came again", tc.mode, tc.every, saved, len(order), inFlight, again)
		})
	}
}
