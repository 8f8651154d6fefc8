package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// chat on a terminal: the reply streams in as text-delta pieces, shown
// live and then replaced by the full message; /quit leaves.
func TestPTYChatStreams(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Streaming: true, TextDeltas: true}})
	e.init()
	ptmx, screen, wait := onPTY(t, e.command(nil, "chat", "example.test"))
	screen.waitFor(t, regexp.MustCompile(`Type your first message`), 20*time.Second)
	if _, err := ptmx.WriteString("The jacket isn't warm enough.\r"); err != nil {
		t.Fatal(err)
	}
	// The pieces, dim, then the line cleared and the full message.
	screen.waitFor(t, regexp.MustCompile(`\x1b\[2m[^\x1b]+\x1b\[0m`), 20*time.Second)
	screen.waitFor(t, regexp.MustCompile(`\r\x1b\[2K\x1b\[1mcompany \(agent\):\x1b\[0m Thanks`), 20*time.Second)
	if _, err := ptmx.WriteString("/status\r"); err != nil {
		t.Fatal(err)
	}
	screen.waitFor(t, regexp.MustCompile(`Conversation \S+: \w+, answered by agent`), 20*time.Second)
	if _, err := ptmx.WriteString("/quit\r"); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit %d; the screen shows:\n%s", code, screen.String())
	}
	if strings.Count(screen.String(), "Thanks, I have noted that.") != 1 {
		t.Fatalf("the full message should show once:\n%q", screen.String())
	}
}

// /signin in a chat runs Device Sign-In right there; the conversation goes
// on in the signed-in Session (spec 7.11).
func TestChatSignIn(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.init()
	cmd := e.command(nil, "--json", "chat", "example.test")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(in, "Hello.\n/signin device poppy:read poppy:write\n")
	link := out.waitFor(t, regexp.MustCompile(`"verification_uri_complete":"(https://[^"]+)"`), 20*time.Second)[1]
	if _, err := e.srv.Browse(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, regexp.MustCompile(`"event":"signed_in"`), 20*time.Second)
	_, _ = io.WriteString(in, "/signin mediated\n/status\n")
	_ = in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, `"next":"poppy signin example.test --method mediated --scope poppy:read"`) && !strings.Contains(s, `"event":"signed_in"`) {
		t.Fatalf("no sign-in: %s", s)
	}
	if st := e.mustRun("--json", "session", "example.test"); !strings.Contains(st, `"signed_in":true`) {
		t.Fatalf("the Session is not signed in: %s", st)
	}
}

// /signin mediated inside a chat reads the credentials from the next lines
// the User types, and the conversation goes on signed in; the password is
// never printed.
func TestChatSignInMediated(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.init()
	cmd := e.command(nil, "--json", "chat", "example.test")
	cmd.Stdin = strings.NewReader("Hello.\n/signin mediated poppy:read\nuser@example.test\ncorrect horse\nThanks.\n")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, `"event":"signed_in"`) {
		t.Fatalf("no sign-in: %s", s)
	}
	if strings.Contains(s, "correct horse") {
		t.Fatalf("the password was printed: %s", s)
	}
	if st := e.mustRun("--json", "session", "example.test"); !strings.Contains(st, `"signed_in":true`) {
		t.Fatalf("the Session is not signed in: %s", st)
	}
}
