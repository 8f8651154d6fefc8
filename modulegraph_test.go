package poppy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxRootModules bounds what a program importing the root module lists in
// `go list -m all` (81 before the heavy leaves became modules of their
// own). docs/layout.md says what each of them is for.
const maxRootModules = 27

// TestRootModuleGraph builds the module graph of a program that imports
// the packages a script uses (the root, signin, keystore, conversation
// and operations) against this tree, outside the workspace, and counts
// it. A requirement added to the root module's go.mod, including one only
// a root-module test needs, shows up here: Go lists every module a
// module's own tests build with.
func TestRootModuleGraph(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/script\n\ngo 1.26.0\n\nrequire github.com/poppyproto/poppy v0.0.0\n\nreplace github.com/poppyproto/poppy => "+root+"\n")
	write("main.go", `package main

import (
	_ "github.com/poppyproto/poppy"
	_ "github.com/poppyproto/poppy/conversation"
	_ "github.com/poppyproto/poppy/keystore"
	_ "github.com/poppyproto/poppy/operations"
	_ "github.com/poppyproto/poppy/signin"
)

func main() {}
`)
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The root's go.sum covers every module the program can need, so the
	// go command checks the downloads against it and asks no checksum
	// database.
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	run("mod", "tidy")
	mods := strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("%d modules", len(mods))
	if len(mods) > maxRootModules {
		t.Errorf("a program importing the root module lists %d modules, want at most %d:\n%s", len(mods), maxRootModules, strings.Join(mods, "\n"))
	}
	// The leaves' heavy requirements, by name, so that a failure says
	// which one came back.
	for _, heavy := range []string{"github.com/getkin/kin-openapi", "github.com/santhosh-tekuri/jsonschema/v6", "github.com/chromedp/chromedp", "github.com/jackc/pgx/v5", "modernc.org/sqlite", "github.com/zalando/go-keyring", "github.com/openai/openai-go/v3", "github.com/spf13/cobra", "golang.org/x/perf",
		// poppytest's MCP server speaks the transport itself, the root
		// module's tests check for leaks with internal/leakcheck, and
		// internal/termtext reads a terminal's attributes on x/sys.
		"github.com/modelcontextprotocol/go-sdk", "go.uber.org/goleak", "golang.org/x/term"} {
		for _, m := range mods {
			if m == heavy {
				t.Errorf("a program importing the root module lists %s, a leaf module's requirement", m)
			}
		}
	}
	if len(mods) < 10 {
		t.Fatalf("only %d modules listed; the graph was not built:\n%s", len(mods), strings.Join(mods, "\n"))
	}
}
