// Package convcrash is the conversation crash tests' harness, shared by
// keystore/sqlitestore's tests (SQLite) and keystore/pgstore's (PostgreSQL),
// each a module of its own: child processes of the test binary that a test
// kills, or that die on purpose, mid-send, and a check of what the Company
// holds afterwards.
package convcrash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// Store is a keystore the children open and close.
type Store interface {
	keystore.Store
	Close() error
}

// Code is the exit code of a child that dies on purpose.
const Code = 7

// The environment of a child: the test's directory (the agent's key
// is key.jwk there) and the conversation it works on.
const (
	EnvDir  = "CONVERSATION_CRASH_DIR"
	EnvConv = "CONVERSATION_CRASH_CONV"
)

const (
	childEnv     = "CONVERSATION_CRASH_CHILD" // mode: "start", "send", "resume", "recover", "loop", "finish"
	childCrashAt = "CONVERSATION_CRASH_AT"    // "before" or "after" the request reaches the Company
)

// crashTransport ends the process on the first conversation POST: before
// sending it, or once the Company has answered but before the SDK sees
// the answer.
type crashTransport struct {
	base http.RoundTripper
	at   string
}

func (t crashTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	crash := t.at != "" && r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/poppy/conversations")
	if crash && t.at == "before" {
		os.Exit(Code)
	}
	resp, err := t.base.RoundTrip(r)
	if crash && err == nil && resp.StatusCode < 300 {
		os.Exit(Code)
	}
	return resp, err
}

// ChildMain, called first in a TestMain, runs the child of a crash test
// and exits when this process is one; open gives it the keystore the
// test's processes share, from the test's directory (and any environment
// the test passed with its storeEnv).
func ChildMain(open func(dir string) (Store, error)) {
	if os.Getenv(readChildEnv) != "" {
		readChildMain(open) // CheckpointCrash's child
	}
	if os.Getenv(childEnv) == "" {
		return
	}
	if err := crashChild(open); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func crashChild(open func(dir string) (Store, error)) error {
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
	agent, err := testenv.ChildAgent(jwk, nil, store, func(rt http.RoundTripper) http.RoundTripper {
		return crashTransport{base: rt, at: os.Getenv(childCrashAt)}
	})
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
	switch os.Getenv(childEnv) {
	case "start":
		_, err = conversation.Start(ctx, sess, conversation.Text("Started before the crash."), nil)
	case "send":
		var c *conversation.Conversation
		if c, err = conversation.Resume(ctx, sess, os.Getenv(EnvConv), nil); err == nil {
			_, err = c.Send(ctx, conversation.Text("Sent before the crash."), nil)
		}
	case "resume":
		_, err = conversation.Resume(ctx, sess, os.Getenv(EnvConv), nil)
	case "loop", "finish":
		err = sendLoop(ctx, sess, os.Getenv(childEnv) == "finish")
	case "recover":
		var cs []*conversation.Conversation
		cs, err = conversation.Recover(ctx, sess, nil)
		if err == nil {
			ids := make([]string, len(cs))
			for i, c := range cs {
				ids[i] = c.ID()
			}
			b, _ := json.Marshal(ids)
			err = os.WriteFile(filepath.Join(dir, "recovered.json"), b, 0o600)
		}
	}
	return err
}

// RunChild runs a child of the test binary in mode ("start", "send",
// "resume", "recover") on conversation conv, dying on purpose (exit Code)
// "before" or "after" its first conversation POST reaches the Company when
// at says so, and returns its exit code: 0 or Code, or it fails the test.
func RunChild(t *testing.T, srv *poppytest.Server, dir, mode, conv, at string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), srv.Env()...), childEnv+"="+mode, EnvDir+"="+dir, EnvConv+"="+conv, childCrashAt+"="+at)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 0 && code != Code {
		t.Fatalf("child %s: exit %d\n%s", mode, code, out)
	}
	return code
}

// BetweenOutboxAndAnswer is the test of a child that writes a message
// to the outbox, the Company records it, and the child dies before it
// reads the answer (or before the request leaves): a second child resumes
// from the shared keystore and sends what was pending, with the same ID.
// The test binary's TestMain must call ChildMain.
func BetweenOutboxAndAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	srv := poppytest.NewServer(t, nil)
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

	// A start whose answer is lost to a crash: Recover in a new process
	// gets the conversation back, and the Company holds one.
	if code := RunChild(t, srv, dir, "start", "", "after"); code != Code {
		t.Fatalf("the child did not crash: %d", code)
	}
	if n := len(srv.Conversations().All()); n != 1 {
		t.Fatalf("%d conversations", n)
	}
	RunChild(t, srv, dir, "recover", "", "")
	b, _ := os.ReadFile(filepath.Join(dir, "recovered.json"))
	var ids []string
	json.Unmarshal(b, &ids)
	all := srv.Conversations().All()
	if len(all) != 1 || len(ids) != 1 || ids[0] != all[0].ID || len(all[0].Messages) != 1 {
		t.Fatalf("recovered %v, Company %+v", ids, all)
	}
	conv := all[0].ID

	for _, at := range []string{"after", "before"} {
		// A message whose answer (or request) is lost to a crash.
		if code := RunChild(t, srv, dir, "send", conv, at); code != Code {
			t.Fatalf("%s: the child did not crash: %d", at, code)
		}
		info, _ := srv.Conversations().Get(conv)
		held := len(info.Messages)
		RunChild(t, srv, dir, "resume", conv, "")
		info, _ = srv.Conversations().Get(conv)
		// The same message ID, held once.
		seen := map[string]int{}
		for _, m := range info.Messages {
			seen[m.ID]++
			if seen[m.ID] > 1 {
				t.Fatalf("%s: message %s held twice", at, m.ID)
			}
		}
		want := held
		if at == "before" {
			want++ // sent for the first time on Resume
		}
		if len(info.Messages) != want {
			t.Fatalf("%s: %d messages, want %d", at, len(info.Messages), want)
		}
		if last := info.Messages[len(info.Messages)-1]; last.Text != "Sent before the crash." {
			t.Fatalf("%s: last message %q", at, last.Text)
		}
		// Each POST carried the same ID and bytes.
		var bodies []string
		for _, r := range srv.RequestsTo(poppytest.EndpointConversation) {
			if r.Method == http.MethodPost && strings.Contains(string(r.Body), info.Messages[len(info.Messages)-1].ID) {
				bodies = append(bodies, string(r.Body))
			}
		}
		if (at == "after" && len(bodies) != 2) || (at == "before" && len(bodies) != 1) || (len(bodies) == 2 && bodies[0] != bodies[1]) {
			t.Fatalf("%s: posts %q", at, bodies)
		}
	}
}

// The app of the SIGKILL test: it sends "message 1", "message 2", ... to
// one conversation, one after another, never choosing an ID, and keeps no
// state of its own. After a restart it follows the recipe of the package
// doc: Recover sends what is pending (a start included), List finds the
// conversation, and the place N of its last sent message says where to go
// on. Its stdout tells the parent what it found and what it sends.
func sendLoop(ctx context.Context, sess *poppy.Session, finish bool) error {
	pend, err := conversation.Pending(ctx, sess)
	if err != nil {
		return err
	}
	fmt.Printf("pending %d\n", len(pend))
	if _, err := conversation.Recover(ctx, sess, nil); err != nil {
		return err
	}
	convs, err := conversation.List(ctx, sess, nil)
	if err != nil {
		return err
	}
	var c *conversation.Conversation
	next := int64(1)
	switch len(convs) {
	case 0:
	case 1:
		c = convs[0]
		sent, err := c.Sent(ctx)
		if err != nil {
			return err
		}
		if len(sent) == 0 {
			return errors.New("a conversation without its start")
		}
		next = sent[len(sent)-1].N + 1
	default:
		return fmt.Errorf("%d conversations", len(convs))
	}
	fmt.Printf("next %d\nready\n", next)
	limit := int64(1 << 62)
	if finish {
		limit = next
	}
	for ; next <= limit; next++ {
		fmt.Printf("sending %d\n", next)
		text := conversation.Text(fmt.Sprintf("message %d", next))
		if c == nil {
			if c, err = conversation.Start(ctx, sess, text, nil); err != nil {
				return err
			}
			continue
		}
		if _, err := c.Send(ctx, text, nil); err != nil {
			return err
		}
	}
	return nil
}

// SDKChosenIDs: an app that lets the SDK choose its message IDs is
// SIGKILLed at random moments of Send, at least 100 times (set
// CONVERSATION_CRASH_KILLS for a longer run, e.g. 1000), and restarted on
// the same keystore each time, the one ChildMain's open gives with
// storeEnv added to the children's environment. Following the recipe of
// the conversation package doc (Recover, List, Sent), it loses no message
// and sends none twice: the Company holds "message 1" to "message K" once
// each, in order (PA-7.3-03, PA-7.3-04).
func SDKChosenIDs(t *testing.T, storeEnv []string) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	kills := 100
	if n, err := strconv.Atoi(os.Getenv("CONVERSATION_CRASH_KILLS")); err == nil && n > 0 {
		kills = n
	}
	srv := poppytest.NewServer(t, nil)
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
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 22))
	var (
		lastSending                   int64 // the message in flight when the last child died
		foundPending, through, absent int   // what the next child found of it
	)
	run := func(mode string, kill bool) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(append(os.Environ(), srv.Env()...), storeEnv...), childEnv+"="+mode, EnvDir+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		var timer *time.Timer
		for l := range lines {
			f := strings.Fields(l)
			if len(f) != 2 && l != "ready" {
				continue
			}
			switch {
			case f[0] == "pending" && lastSending > 0:
				if f[1] != "0" {
					foundPending++
				}
			case f[0] == "next" && lastSending > 0:
				n, _ := strconv.ParseInt(f[1], 10, 64)
				switch {
				case n == lastSending+1:
					through++
				case n == lastSending:
					absent++
				default:
					t.Fatalf("message %d was in flight, the app goes on with %d", lastSending, n)
				}
			case l == "ready" && kill:
				// A random moment of the sends that follow.
				timer = time.AfterFunc(time.Duration(rng.IntN(40_000))*time.Microsecond, func() { cmd.Process.Kill() })
			case f[0] == "sending":
				lastSending, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		err = cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && !ee.Exited()
		if (err != nil && !killed) || (killed && !kill) {
			t.Fatalf("child %s: %v\n%s", mode, err, stderr.Bytes())
		}
	}
	start := time.Now()
	for range kills {
		run("loop", true)
	}
	run("finish", false)

	convs := srv.Conversations().All()
	if len(convs) != 1 {
		t.Fatalf("the Company holds %d conversations, want 1", len(convs))
	}
	info, _ := srv.Conversations().Get(convs[0].ID)
	var lost, dup int
	ids := map[string]bool{}
	want := 1
	for _, m := range info.Messages {
		if ids[m.ID] {
			t.Fatalf("message ID %s held twice", m.ID)
		}
		ids[m.ID] = true
		var n int
		if _, err := fmt.Sscanf(m.Text, "message %d", &n); err != nil {
			t.Fatalf("message %q", m.Text)
		}
		switch {
		case n < want:
			dup++
		case n > want:
			lost += n - want
			want = n + 1
		default:
			want++
		}
	}
	t.Logf("%d kills in %v; the Company holds %d messages; the message in flight was found pending %d times, through (held) %d times, never written %d times; %d lost, %d duplicated",
		kills, time.Since(start).Round(time.Millisecond), len(info.Messages), foundPending, through, absent, lost, dup)
	if lost != 0 || dup != 0 {
		t.Fatalf("%d messages lost, %d duplicated", lost, dup)
	}
	if through+absent < kills {
		t.Fatalf("only %d of %d kills came during a send", through+absent, kills)
	}
}
