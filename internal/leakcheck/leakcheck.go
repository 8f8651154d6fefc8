// Package leakcheck fails a test binary whose tests leave goroutines
// running. It is the root module's goroutine-leak check in TestMain, in
// place of go.uber.org/goleak: a requirement of the root module's tests is
// listed by every user's `go list -m all` (docs/layout.md, Modules), and
// the check is small. It reads the stacks runtime.Stack prints and, like
// goleak, leaves alone the goroutines of package testing and os/signal,
// and waits a while for goroutines that are ending.
package leakcheck

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// M is the part of *testing.M that VerifyTestMain runs (internal/realtest's
// Main returns one too).
type M interface{ Run() int }

// VerifyTestMain runs the tests of m and, if they passed, checks that they
// left no goroutine running (waiting up to a few seconds for those that
// are ending). It prints the stacks of those left and exits 1; otherwise
// it exits with the tests' code. ignoreTop names functions (as a stack
// prints them, "internal/poll.runtime_pollWait") that a goroutine may have
// at the top of its stack and still not count.
func VerifyTestMain(m M, ignoreTop ...string) {
	code := m.Run()
	if code == 0 {
		if err := Find(ignoreTop...); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Find waits up to about five seconds for every goroutine but the calling
// one, the testing package's and the signal handler's to end, and returns
// an error naming those that did not, with their stacks.
func Find(ignoreTop ...string) error {
	var left []string
	for wait := time.Millisecond; ; wait *= 2 {
		left = leftover(ignoreTop)
		if len(left) == 0 {
			return nil
		}
		if wait > 2*time.Second {
			break
		}
		time.Sleep(wait)
	}
	return errors.New("found unexpected goroutines:\n" + strings.Join(left, "\n\n"))
}

// leftover returns the stacks of the goroutines that count.
func leftover(ignoreTop []string) []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocks := strings.Split(strings.TrimSpace(string(buf)), "\n\n")
	var out []string
	for i, b := range blocks {
		if i == 0 { // runtime.Stack prints the calling goroutine first
			continue
		}
		if !ignored(b, ignoreTop) {
			out = append(out, b)
		}
	}
	return out
}

// ignored reports whether the goroutine whose stack is b does not count:
// the testing package's own (a parallel test waiting its turn, the runner
// waiting for its tests), the signal handler os/signal starts, a CGo
// callback thread in a syscall, or one whose top function is in ignoreTop.
func ignored(b string, ignoreTop []string) bool {
	lines := strings.Split(b, "\n")
	if len(lines) < 2 {
		return true
	}
	state := ""
	if i, j := strings.Index(lines[0], "["), strings.LastIndex(lines[0], "]"); i >= 0 && j > i {
		state = lines[0][i+1 : j]
	}
	top := function(lines[1])
	switch top {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		if strings.HasPrefix(state, "chan receive") {
			return true
		}
	case "os/signal.signal_recv", "os/signal.loop":
		return true
	}
	for _, f := range ignoreTop {
		if top == f {
			return true
		}
	}
	for _, l := range lines[1:] {
		if f := function(l); f == "runtime.ensureSigM" || (f == "runtime.goexit" && strings.HasPrefix(state, "syscall")) {
			return true
		}
	}
	return false
}

// function returns the function a stack line calls, "" for a file line:
// "net/http.(*conn).serve(0xc000…)" gives "net/http.(*conn).serve".
func function(line string) string {
	if strings.HasPrefix(line, "\t") {
		return ""
	}
	line = strings.TrimPrefix(line, "created by ")
	if i := strings.LastIndex(line, "("); i > 0 && strings.HasSuffix(line, ")") {
		line = line[:i]
	}
	if i := strings.Index(line, " in goroutine "); i > 0 {
		line = line[:i]
	}
	return line
}
