// Package realtest is how the SDK's tests deal with the real components
// some of them need (an OS keyring, a PostgreSQL server, a browser): a test
// that finds its component missing calls [Missing], which skips it, or
// fails it when POPPY_TEST_REAL=1 (as .ci/run sets) asks for every real
// component. [Main] wraps a package's TestMain so that, after the tests,
// one line per missing component says how many tests skipped and why:
// `go test ./...` shows nothing of a passing package but its "ok" line, so
// the line also goes to the terminal, when there is one.
package realtest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// Env is the variable that turns a missing component into a failure.
const Env = "POPPY_TEST_REAL"

var (
	mu      sync.Mutex
	missing = map[string]*gap{}
)

// gap is one missing component and the tests it made skip.
type gap struct {
	why   string
	tests int
}

// Missing skips tb because the real component named is missing (why says
// what is missing and how to provide it), or fails it when POPPY_TEST_REAL
// is 1. It never returns.
func Missing(tb testing.TB, component, why string) {
	tb.Helper()
	if os.Getenv(Env) == "1" {
		tb.Fatalf("%s=1 but %s is missing: %s", Env, component, why)
	}
	mu.Lock()
	g := missing[component]
	if g == nil {
		g = &gap{why: why}
		missing[component] = g
	}
	g.tests++
	mu.Unlock()
	tb.Skipf("%s is missing: %s", component, why)
}

// M is what Main returns: a testing.M whose Run prints the summary.
type M interface{ Run() int }

type summaryM struct {
	m   M
	out func() []io.Writer
}

// Main returns m with a Run that, after the tests, prints one line per
// missing component, to stdout and to the controlling terminal if there is
// one. Use it as leakcheck.VerifyTestMain(realtest.Main(m)) or
// os.Exit(realtest.Main(m).Run()).
func Main(m M) M { return &summaryM{m: m, out: outputs} }

func (s *summaryM) Run() int {
	code := s.m.Run()
	lines := Summary()
	if len(lines) == 0 {
		return code
	}
	for _, w := range s.out() {
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		if c, ok := w.(io.Closer); ok && w != io.Writer(os.Stdout) {
			c.Close()
		}
	}
	return code
}

// Summary returns the lines Main prints: one per missing component, in
// name order.
func Summary() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]string, 0, len(names))
	for _, n := range names {
		g := missing[n]
		noun := "tests"
		if g.tests == 1 {
			noun = "test"
		}
		out = append(out, fmt.Sprintf("poppy: %d %s skipped: %s is missing: %s (%s=1 makes this a failure)", g.tests, noun, n, g.why, Env))
	}
	return out
}

// outputs are stdout (seen with -v or when the package fails) and the
// terminal, which go test does not capture.
func outputs() []io.Writer {
	ws := []io.Writer{os.Stdout}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		ws = append(ws, tty)
	}
	return ws
}

// pathMu serializes WatchPATH's changes of directory.
var pathMu sync.Mutex

// WatchPATH makes go test's cache see the directories of PATH, for a test
// that looks for a program there (Chromium) and skips without it. go test
// serves a passing run again from its cache while the environment
// variables the test read and the files within its module it opened or
// stat'ed are unchanged; it does not look again at files outside the
// module, so exec.LookPath's stat of the program's file is not seen, and a
// run that skipped would be served after Chromium is installed. A
// directory the test changed into is seen (its modification time, which
// installing a program there changes), wherever it is: WatchPATH changes
// into each directory of PATH and back. (That is how cmd/go's test cache
// reads the test log as of Go 1.26: a "chdir" entry is hashed with the
// directory's stat wherever it is, "stat" and "open" entries only inside
// the module; checked by installing Chromium into a PATH directory between
// two runs.) Call it before the look-up, from a test that is not parallel:
// the working directory is the process's.
func WatchPATH() {
	pathMu.Lock()
	defer pathMu.Unlock()
	wd, err := os.Getwd()
	if err != nil {
		return
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.IsAbs(dir) {
			_ = os.Chdir(dir)
		}
	}
	if err := os.Chdir(wd); err != nil {
		panic("realtest: can't return to the working directory: " + err.Error())
	}
}
