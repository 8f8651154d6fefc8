package main

// The interactive paths in a pseudo-terminal, reading what the screen
// shows: Device Sign-In's QR code and live countdown, Mediated Sign-In's
// prompts with the password not echoed, colour only on a terminal.

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/mdp/qrterminal/v3"

	"github.com/poppyproto/poppy/poppytest"
)

// ptyProc is a process on a pseudo-terminal of its own.
type ptyProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	ptmx   *os.File
	screen *syncBuffer
	copied chan struct{}
	exited chan int
}

// startPTY starts cmd on a new pseudo-terminal.
func startPTY(t *testing.T, cmd *exec.Cmd) *ptyProc {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 60, Cols: 160})
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	p := &ptyProc{t: t, cmd: cmd, ptmx: ptmx, screen: &syncBuffer{}, copied: make(chan struct{}), exited: make(chan int, 1)}
	go func() { _, _ = io.Copy(p.screen, ptmx); close(p.copied) }()
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		p.exited <- code
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = ptmx.Close()
		<-p.copied
	})
	return p
}

// wait waits up to d for the process to exit and returns its exit code;
// the test fails if it is still running then.
func (p *ptyProc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case code := <-p.exited:
		// The child is gone: the master reads EOF (EIO) once the
		// output is drained.
		select {
		case <-p.copied:
		case <-time.After(5 * time.Second):
		}
		return code
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		p.t.Fatalf("still running after %v; the screen shows:\n%s", d, p.screen.String())
		return -1
	}
}

// interrupt types Ctrl-C and waits up to 10 s (a generous bound on a
// shared machine) for the process to end; it returns the exit code and
// how long the process took to end, which the test logs.
func (p *ptyProc) interrupt() (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if _, err := p.ptmx.Write([]byte{3}); err != nil {
		p.t.Fatal(err)
	}
	code := p.wait(10 * time.Second)
	d := time.Since(start)
	p.t.Logf("exit %d %v after Ctrl-C", code, d.Round(time.Millisecond))
	return code, d
}

// onPTY starts cmd on a new pseudo-terminal and returns the screen and a
// function that waits (up to 60 s) for the process and returns its exit
// code.
func onPTY(t *testing.T, cmd *exec.Cmd) (*os.File, *syncBuffer, func() int) {
	t.Helper()
	p := startPTY(t, cmd)
	return p.ptmx, p.screen, func() int { return p.wait(60 * time.Second) }
}

func TestPTYDeviceSignInQRAndCountdown(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceInterval: time.Second}})
	e.init()
	_, screen, wait := onPTY(t, e.command(nil, "signin", "example.test", "--method", "device"))

	link := screen.waitFor(t, regexp.MustCompile(`or open (https://\S+)`), 20*time.Second)[1]
	screen.waitFor(t, regexp.MustCompile(`[▀▄█]{8,}`), 5*time.Second)
	// The QR code is that of verification_uri_complete.
	var qr strings.Builder
	qrterminal.GenerateWithConfig(link, qrterminal.Config{Level: qrterminal.L, Writer: &qr, HalfBlocks: true, QuietZone: 1})
	screen.waitFor(t, regexp.MustCompile(regexp.QuoteMeta(strings.ReplaceAll(qr.String(), "\n", "\r\n"))), 5*time.Second)
	// The countdown is live: the same line is rewritten with the time
	// left, and it moves.
	first := screen.waitFor(t, regexp.MustCompile(`\r\x1b\[K. Waiting for you to approve\.\.\. (\d+:\d\d) left`), 10*time.Second)[1]
	countdown := regexp.MustCompile(`Waiting for you to approve\.\.\. (\d+:\d\d) left`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := countdown.FindAllStringSubmatch(screen.String(), -1)
		if last := all[len(all)-1][1]; last != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the countdown did not move from %s:\n%s", first, screen.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := e.srv.Browse(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	screen.waitFor(t, regexp.MustCompile(`Signed in.* to Example Company`), 20*time.Second)
	if code := wait(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, screen.String())
	}
	// The User code is on the screen; the device code never is.
	for _, r := range e.srv.RequestsTo(poppytest.EndpointToken) {
		if dc := r.Form.Get("device_code"); dc != "" && strings.Contains(screen.String(), dc) {
			t.Fatal("the device code reached the screen")
		}
	}
}

func TestPTYMediatedPromptsWithoutEcho(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}})
	e.init()
	ptmx, screen, wait := onPTY(t, e.command(nil, "signin", "example.test", "--method", "mediated"))

	screen.waitFor(t, regexp.MustCompile(`Email: $`), 20*time.Second)
	_, _ = ptmx.WriteString("user@example.test\r")
	screen.waitFor(t, regexp.MustCompile(`Password: $`), 10*time.Second)
	_, _ = ptmx.WriteString("correct horse\r")
	screen.waitFor(t, regexp.MustCompile(`Code: $`), 10*time.Second)
	code := e.srv.SignIn().LastCode()
	if code == "" {
		t.Fatal("the fake sent no one-time code")
	}
	_, _ = ptmx.WriteString(code + "\r")
	screen.waitFor(t, regexp.MustCompile(`Signed in.* to Example Company`), 20*time.Second)
	if c := wait(); c != 0 {
		t.Fatalf("exit %d:\n%s", c, screen.String())
	}
	got := screen.String()
	// Exactly the declared fields, in order; the email is echoed as typed,
	// the password is not.
	if i, j := strings.Index(got, "Email: "), strings.Index(got, "Password: "); i < 0 || j < i {
		t.Fatalf("fields not asked in order:\n%s", got)
	}
	if !strings.Contains(got, "user@example.test") {
		t.Fatalf("the email was not echoed:\n%s", got)
	}
	if strings.Contains(got, "correct horse") {
		t.Fatalf("the password was echoed:\n%s", got)
	}
	if n := strings.Count(got, ": "); strings.Count(got, "Email: ") != 1 || strings.Count(got, "Password: ") != 1 || n < 3 {
		t.Fatalf("unexpected prompts:\n%s", got)
	}
}

// Colour on a terminal, none with NO_COLOR or --json, none on a pipe.
func TestPTYColour(t *testing.T) {
	e := newCLIEnv(t, nil)
	e.init()
	_, screen, wait := onPTY(t, e.command(nil, "status"))
	wait()
	if !strings.Contains(screen.String(), "\x1b[1m") {
		t.Fatalf("no colour on a terminal: %q", screen.String())
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{{[]string{"NO_COLOR=1"}, []string{"status"}}, {nil, []string{"--json", "status"}}} {
		_, screen, wait := onPTY(t, e.command(c.env, c.args...))
		wait()
		if strings.Contains(screen.String(), "\x1b[") {
			t.Fatalf("%v %v: escape sequences on the screen: %q", c.env, c.args, screen.String())
		}
	}
	out := e.mustRun("status")
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("escape sequences on a pipe: %q", out)
	}
}
