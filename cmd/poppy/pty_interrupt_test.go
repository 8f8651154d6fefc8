package main

// Ctrl-C in a pseudo-terminal: any command
// stops at once with exit code 130 and the one word "interrupted", and
// nothing of the keystore is lost. Each test waits up to 10 s for the exit
// (a generous deadline on a shared machine, not a timed assertion) and
// logs how long the exit took.

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/poppyproto/poppy/poppytest"
)

// mustInterrupt types Ctrl-C and fails the test unless the process ends
// with exit code 130 and says "interrupted".
func (p *ptyProc) mustInterrupt() {
	p.t.Helper()
	code, _ := p.interrupt()
	if code != exitInterrupted {
		p.t.Fatalf("exit %d after Ctrl-C, want %d; the screen shows:\n%s", code, exitInterrupted, p.screen.String())
	}
	if !regexp.MustCompile(`(?m)^interrupted\r?$`).MatchString(p.screen.String()) {
		p.t.Fatalf("no one-word %q line after Ctrl-C; the screen shows:\n%q", "interrupted", p.screen.String())
	}
	if strings.Contains(p.screen.String(), "context canceled") {
		p.t.Fatalf("the interruption reads as an error:\n%s", p.screen.String())
	}
}

// Ctrl-C while Device Sign-In waits for the User: exit 130 (not 1 with
// "error: context canceled"), the countdown line cleared, nothing stored.
func TestPTYSignInDeviceInterrupted(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.init()
	p := startPTY(t, e.command(nil, "signin", "example.test", "--method", "device"))
	p.screen.waitFor(t, regexp.MustCompile(`Waiting for you to approve\.\.\. \d+:\d\d left`), 20*time.Second)
	p.mustInterrupt()
	if !regexp.MustCompile(`left \(Ctrl-C to stop\)(\^C)?\r\x1b\[K`).MatchString(p.screen.String()) {
		t.Fatalf("the countdown line was not cleared:\n%q", p.screen.String())
	}
	if out := e.mustRun("--json", "status"); strings.Contains(out, `"signed_in":true`) {
		t.Fatalf("signed in after Ctrl-C: %s", out)
	}
}

// Ctrl-C at Mediated Sign-In's password prompt, whose echo is off: the
// read of the terminal stops, exit 130, and the terminal has its echo back.
func TestPTYSignInMediatedInterrupted(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.init()
	p := startPTY(t, e.command(nil, "signin", "example.test", "--method", "mediated"))
	p.screen.waitFor(t, regexp.MustCompile(`Email: $`), 20*time.Second)
	_, _ = p.ptmx.WriteString("user@example.test\r")
	p.screen.waitFor(t, regexp.MustCompile(`Password: $`), 10*time.Second)
	p.mustInterrupt()
	if !echoOn(t, p.ptmx) {
		t.Fatal("the terminal's echo is still off after Ctrl-C")
	}
	if out := e.mustRun("--json", "status"); strings.Contains(out, `"signed_in":true`) {
		t.Fatalf("signed in after Ctrl-C: %s", out)
	}
}

// echoOn reports whether the pseudo-terminal echoes what is typed.
func echoOn(t *testing.T, ptmx *os.File) bool {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(ptmx.Fd()), ioctlGetTermios)
	if err != nil {
		t.Skipf("reading the terminal's settings: %v", err)
	}
	return tio.Lflag&unix.ECHO != 0
}

// Ctrl-C at the chat's prompt, before any message and after a turn: exit
// 130. The conversation is kept: resumed, it goes on from the saved
// cursor, without showing the first exchange again.
func TestPTYChatInterruptedAtPrompt(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.init()
	p := startPTY(t, e.command(nil, "chat", "example.test"))
	p.screen.waitFor(t, regexp.MustCompile(`Type your first message`), 20*time.Second)
	p.mustInterrupt()

	p = startPTY(t, e.command(nil, "chat", "example.test"))
	p.screen.waitFor(t, regexp.MustCompile(`Type your first message`), 20*time.Second)
	_, _ = p.ptmx.WriteString("The jacket isn't warm enough.\r")
	conv := p.screen.waitFor(t, regexp.MustCompile(`--conversation (\S+)\)`), 20*time.Second)[1]
	p.screen.waitFor(t, regexp.MustCompile(`company \(agent\):\S* Thanks, I have noted that\.`), 20*time.Second)
	p.screen.waitFor(t, regexp.MustCompile(`\(idle, answered by agent\)`), 20*time.Second)
	p.mustInterrupt()

	cmd := e.command(nil, "--json", "chat", "example.test", "--conversation", conv)
	cmd.Stdin = strings.NewReader("Thanks.\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("resuming: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "warm enough") || strings.Count(string(out), `"text":"Thanks, I have noted that."`) != 1 {
		t.Fatalf("resumed from the wrong place (the cursor was lost):\n%s", out)
	}
}

// Ctrl-C while the Company's turn is being streamed (a reply shown, the
// Company still working, the stream open): exit 130. Resumed later, the
// conversation shows the rest of the turn, not what was shown before.
func TestPTYChatInterruptedWhileStreaming(t *testing.T) {
	release := make(chan struct{})
	var once bool
	e := newCLIEnv(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{
		Streaming: true, TextDeltas: true, ReplyDelay: 10 * time.Millisecond,
		Agent: func(turn *poppytest.Turn) {
			if once {
				return
			}
			once = true
			turn.Reply(poppytest.Reply{Text: "Let me look at your order.", Deltas: []string{"Let me ", "look at ", "your order."}})
			<-release // still working
			turn.Say("The insulated one is warmer.")
		},
	}})
	t.Cleanup(func() { close(release) }) // before the fake closes
	e.init()
	p := startPTY(t, e.command(nil, "chat", "example.test"))
	p.screen.waitFor(t, regexp.MustCompile(`Type your first message`), 20*time.Second)
	_, _ = p.ptmx.WriteString("Is there a warmer jacket?\r")
	conv := p.screen.waitFor(t, regexp.MustCompile(`--conversation (\S+)\)`), 20*time.Second)[1]
	p.screen.waitFor(t, regexp.MustCompile(`\x1b\[2m[^\x1b]+\x1b\[0m`), 20*time.Second) // a piece, live
	p.screen.waitFor(t, regexp.MustCompile(`company \(agent\):\S* Let me look at your order\.`), 20*time.Second)
	p.mustInterrupt()

	release <- struct{}{} // the Company finishes its turn
	cmd := e.command(nil, "--json", "chat", "example.test", "--conversation", conv)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("resuming: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "The insulated one is warmer.") || strings.Contains(string(out), "Let me look at your order.") {
		t.Fatalf("resumed from the wrong place:\n%s", out)
	}
}

// A second Ctrl-C while the command cleans up stops it without waiting for
// the cleanup, and the terminal gets its settings back. stuckcleanup (in
// TestMain) runs main's interruptible and then cleans up forever with echo
// off, as a command stopped at a password prompt would.
func TestPTYSecondInterruptForces(t *testing.T) {
	path, err := exec.LookPath("stuckcleanup")
	if err != nil {
		t.Fatalf("stuckcleanup is not on $PATH (TestMain installs it): %v", err)
	}
	p := startPTY(t, exec.Command(path))
	p.screen.waitFor(t, regexp.MustCompile(`READY`), 20*time.Second)
	if echoOn(t, p.ptmx) {
		t.Fatal("stuckcleanup did not turn echo off")
	}
	if _, err := p.ptmx.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
	p.screen.waitFor(t, regexp.MustCompile(`CLEANING UP`), 10*time.Second)
	select {
	case code := <-p.exited:
		t.Fatalf("exit %d during the cleanup, before the second Ctrl-C", code)
	default:
	}
	if code, _ := p.interrupt(); code != exitInterrupted {
		t.Fatalf("exit %d after the second Ctrl-C, want %d:\n%s", code, exitInterrupted, p.screen.String())
	}
	if !echoOn(t, p.ptmx) {
		t.Fatal("the terminal's echo is still off after the forced exit")
	}
}

// stuckCleanupMain is the stuckcleanup command of the tests: it takes
// main's signal handling, turns the terminal's echo off, and at the first
// signal starts a cleanup that never ends.
func stuckCleanupMain() int {
	ctx, stop := interruptible(os.Stderr, os.Stdin)
	defer stop()
	fd := int(os.Stdin.Fd())
	tio, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		fmt.Println("no terminal:", err)
		return 1
	}
	noEcho := *tio
	noEcho.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &noEcho); err != nil {
		fmt.Println("no terminal:", err)
		return 1
	}
	fmt.Println("READY")
	<-ctx.Done()
	fmt.Println("CLEANING UP")
	select {}
}

// Ctrl-C at the approval prompt of ops confirm: exit 130, and the
// operation stays proposed (neither approved nor declined).
func TestPTYOpsConfirmInterrupted(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{})
	e.init()
	e.deviceSignIn(t)
	id := e.proposeExchange(t, "ord_1")
	p := startPTY(t, e.command(nil, "ops", "confirm", "example.test", id))
	p.screen.waitFor(t, regexp.MustCompile(`Type "yes" to approve`), 20*time.Second)
	p.mustInterrupt()
	if out := e.mustRun("--json", "ops", "show", "example.test", id); !strings.Contains(out, `"state":"proposed"`) {
		t.Fatalf("Ctrl-C changed the operation: %s", out)
	}
}
