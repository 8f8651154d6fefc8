package main

import (
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// chatPiped runs poppy chat with one message on a pipe, with --json when
// jsonOut. With hold, stdin stays open until the reply has been shown;
// without, it ends at once.
func (e *cliEnv) chatPiped(t *testing.T, hold, jsonOut bool, flags ...string) string {
	t.Helper()
	args := []string{"chat", "example.test"}
	if jsonOut {
		args = append([]string{"--json"}, args...)
	}
	cmd := e.command(nil, append(args, flags...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(in, "Is there a warmer jacket?\n")
	if hold {
		out.waitFor(t, regexp.MustCompile(`Thanks, I have noted that\.`), 20*time.Second)
		out.waitFor(t, regexp.MustCompile(`idle`), 20*time.Second)
	}
	_ = in.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chat: %v\n%s%s", err, out.String(), errOut.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("chat still running 60 s after its stdin ended:\n%s", out.String())
	}
	return out.String()
}

// chatEvents is the --json chat output as "event text" lines, without IDs.
func chatEvents(t *testing.T, out string) []string {
	t.Helper()
	var evs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Event   string `json:"event"`
			Text    string `json:"text"`
			Status  string `json:"status"`
			Message struct {
				Role, Text string
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("not a JSON line: %q\n%s", l, out)
		}
		var parts []string
		for _, p := range []string{ev.Event, ev.Message.Role, ev.Message.Text + ev.Text + ev.Status} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		evs = append(evs, strings.Join(parts, " "))
	}
	return evs
}

// A script that pipes one message into chat gets the Company's whole turn,
// each event once, however long its stdin stays open:
// with --json the text-delta pieces too; in text, each reply once (no
// pieces without a terminal).
func TestChatPipedOneMessage(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Streaming: true, TextDeltas: true}})
	e.init()
	want := []string{
		"started",
		"message user Is there a warmer jacket?",
		"text-delta Thanks, ",
		"text-delta I have ",
		"text-delta noted that.",
		"message company Thanks, I have noted that.",
		"state idle",
	}
	for _, hold := range []bool{false, true} {
		got := chatEvents(t, e.chatPiped(t, hold, true))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("--json, stdin held open %v: events\n%s\nwant\n%s", hold, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	for _, hold := range []bool{false, true} {
		out := e.chatPiped(t, hold, false)
		if n := strings.Count(out, "Thanks, I have noted that."); n != 1 {
			t.Errorf("text, stdin held open %v: the reply shown %d times:\n%s", hold, n, out)
		}
		if !strings.Contains(out, "company (agent): Thanks, I have noted that.\n") || strings.Contains(out, "company: ") {
			t.Errorf("text, stdin held open %v: not the full reply alone:\n%s", hold, out)
		}
	}
}

// With --no-stream (long polls) the same script gets the same turn,
// without the pieces, which only a stream carries.
func TestChatPipedLongPoll(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Streaming: true, TextDeltas: true}})
	e.init()
	want := []string{
		"started",
		"message user Is there a warmer jacket?",
		"message company Thanks, I have noted that.",
		"state idle",
	}
	for _, hold := range []bool{false, true} {
		got := chatEvents(t, e.chatPiped(t, hold, true, "--no-stream"))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("stdin held open %v: events\n%s\nwant\n%s", hold, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// A Company that answers the message at once ("working") and replies later:
// the chat whose stdin ended waits for the reply, pieces included, and the
// end of the turn.
func TestChatPipedLateReply(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{
		Streaming: true, TextDeltas: true, ReplyDelay: 300 * time.Millisecond}})
	e.init()
	got := strings.Join(chatEvents(t, e.chatPiped(t, false, true)), "\n")
	for _, want := range []string{"text-delta noted that.", "message company Thanks, I have noted that.\nstate idle"} {
		if !strings.Contains(got, want) {
			t.Fatalf("events\n%s\nwant them to hold %q", got, want)
		}
	}
}
