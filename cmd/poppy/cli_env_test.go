package main

// cliEnv runs the poppy command as child processes against an in-process
// fake Company, for the Go tests that need more than a script: a
// pseudo-terminal, or the fake's request log.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

type cliEnv struct {
	t         *testing.T
	srv       *poppytest.Server
	agentAddr string
	dir       string
	env       []string
}

func newCLIEnv(t *testing.T, opts *poppytest.Options) *cliEnv {
	t.Helper()
	if _, err := exec.LookPath("poppy"); err != nil {
		t.Fatalf("poppy is not on $PATH (TestMain installs it): %v", err)
	}
	if opts == nil {
		opts = &poppytest.Options{}
	}
	if opts.SignIn.DeviceInterval == 0 {
		opts.SignIn.DeviceInterval = time.Second
	}
	srv, addr, err := newFake(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &cliEnv{t: t, srv: srv, agentAddr: addr, dir: dir}
	e.env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, ".config"),
		"POPPY_PROFILE=alice",
		"TERM=xterm",
		"BROWSER=true",
	}, srv.Env()...)
	// The OS keyring, for --keyring.
	for _, k := range []string{"DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_DATA_HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			e.env = append(e.env, k+"="+v)
		}
	}
	return e
}

// command returns a poppy command line ready to start.
func (e *cliEnv) command(env []string, args ...string) *exec.Cmd {
	path, _ := exec.LookPath("poppy")
	cmd := exec.Command(path, args...)
	cmd.Dir = e.dir
	cmd.Env = append(append([]string{}, e.env...), env...)
	return cmd
}

// run runs poppy to the end.
func (e *cliEnv) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	cmd := e.command(nil, args...)
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return o.String(), er.String(), code
}

// mustRun runs poppy and fails the test unless it exits 0.
func (e *cliEnv) mustRun(args ...string) string {
	e.t.Helper()
	out, errOut, code := e.run(args...)
	if code != 0 {
		e.t.Fatalf("poppy %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// init makes the identity and serves it in the background for the rest of
// the test.
func (e *cliEnv) init(global ...string) *syncBuffer {
	e.t.Helper()
	e.mustRun(append(global, "init", "--base-url", "https://agent.test/poppy/")...)
	cmd := e.command(nil, append(global, "serve-identity", "--addr", e.agentAddr)...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	out.waitFor(e.t, regexp.MustCompile(`Stop with Ctrl-C|"event":"listening"`), 20*time.Second)
	return out
}

// syncBuffer is what a process wrote, readable while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the text matches re and returns the match.
func (b *syncBuffer) waitFor(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%q not seen in %v; the screen shows:\n%s", re, d, b.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
