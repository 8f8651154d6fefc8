package realtest

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"
)

type fakeM struct{ run func() }

func (f fakeM) Run() int { f.run(); return 0 }

// One line per missing component, counting its skipped tests.
func TestSummary(t *testing.T) {
	mu.Lock()
	saved := missing
	missing = map[string]*gap{}
	mu.Unlock()
	defer func() { mu.Lock(); missing = saved; mu.Unlock() }()
	t.Setenv(Env, "")
	var buf bytes.Buffer
	m := &summaryM{out: func() []io.Writer { return []io.Writer{&buf} }, m: fakeM{func() {
		for i := range 3 {
			t.Run("pg", func(t *testing.T) { Missing(t, "PostgreSQL", "POPPY_TEST_POSTGRES_URL is not set") })
			if i == 0 {
				t.Run("keyring", func(t *testing.T) { Missing(t, "OS keyring", "no D-Bus session bus") })
			}
		}
	}}}
	if code := m.Run(); code != 0 {
		t.Fatal(code)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "poppy: 1 test skipped: OS keyring is missing: no D-Bus session bus") ||
		!strings.HasPrefix(lines[1], "poppy: 3 tests skipped: PostgreSQL is missing: POPPY_TEST_POSTGRES_URL is not set") {
		t.Fatalf("summary:\n%s", buf.String())
	}
}

// No missing component, no line.
func TestNoSummary(t *testing.T) {
	mu.Lock()
	saved := missing
	missing = map[string]*gap{}
	mu.Unlock()
	defer func() { mu.Lock(); missing = saved; mu.Unlock() }()
	var buf bytes.Buffer
	m := &summaryM{out: func() []io.Writer { return []io.Writer{&buf} }, m: fakeM{func() {}}}
	m.Run()
	if buf.Len() != 0 {
		t.Fatalf("printed %q", buf.String())
	}
}

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// WatchPATH leaves the working directory as it found it.
func TestWatchPATHKeepsTheWorkingDirectory(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir()+string(os.PathListSeparator)+"relative"+string(os.PathListSeparator)+os.TempDir())
	WatchPATH()
	if now, _ := os.Getwd(); now != wd {
		t.Fatalf("the working directory is %s, want %s", now, wd)
	}
}
