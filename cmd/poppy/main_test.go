package main

// End-to-end tests: testscript scripts (testdata/script/*.txtar) run the
// poppy command, unmodified, as separate processes against the fake
// Company, itself a separate process (fakeco) started by the scripts with
// "fake start": the environment it prints (poppytest.Server.Env) makes it
// the HTTPS proxy of the poppy processes, whose default client reaches it
// with the real clock.
//
// Script commands besides testscript's own:
//
//	fake start [fakeco flags]   start the fake; its environment goes into the script's
//	fake browse URL             the User opens URL in their browser and decides
//	fake user approve|deny|never [scopes]
//	fake code                   set $CODE to the last one-time code the fake sent
//	fake violations             fail if the fake saw a protocol violation
//	spawn NAME PROG ARGS...     start PROG in the background, output to NAME.out / NAME.err
//	await NAME [EXIT]           wait for NAME to end with EXIT (default 0)
//	waitfor FILE REGEXP [VAR]   wait until FILE matches; set VAR to the first group
//	helpall                     every command's --help has examples of it, and a
//	                            usage error names that command's --help
//	loadenv FILE                set the NAME=value lines of FILE (poppy fake --env-file),
//	                            as "set -a; . FILE; set +a" does in a shell
//	httpget URL                 GET a loopback URL (poppy fake's page); the body is stdout

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/internal/realtest"
)

type leakCheckM struct{ m realtest.M }

func (l leakCheckM) Run() int {
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			// The session bus connection the keyring check opens stays
			// for the process (as in keystore/keyring's tests).
			goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.newConn.func1"),
			goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.(*Conn).inWorker"),
			goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.(*Conn).outWorker")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

func TestMain(m *testing.M) {
	testscript.Main(leakCheckM{realtest.Main(m)}, map[string]func(){
		"poppy":        main, // unmodified: it reaches the fake as its HTTPS proxy (poppytest.Server.Env)
		"fakeco":       func() { os.Exit(fakeCompanyMain()) },
		"fakebrowser":  func() { os.Exit(fakeBrowserMain()) },
		"stuckcleanup": func() { os.Exit(stuckCleanupMain()) },
	})
}

func TestScripts(t *testing.T) { testscript.Run(t, scriptParams("testdata/script")) }

func scriptParams(dir string) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		// [openai]: this build runs poppy ask (the build tag openai).
		Condition: func(cond string) (bool, error) {
			if cond == "openai" {
				return askBuilt, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(e *testscript.Env) error {
			e.Setenv("XDG_CONFIG_HOME", filepath.Join(e.WorkDir, ".config"))
			e.Setenv("HOME", e.WorkDir)
			e.Setenv("POPPY_PROFILE", "alice")
			e.Setenv("NO_COLOR", "")
			e.Setenv("BROWSER", "fakebrowser")
			e.Values[procsKey{}] = &procs{m: map[string]*proc{}}
			return nil
		},
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"fake":    cmdFake,
			"spawn":   cmdSpawn,
			"await":   cmdAwait,
			"waitfor": cmdWaitFor,
			"helpall": cmdHelpAll,
			"loadenv": cmdLoadEnv,
			"httpget": cmdHTTPGet,
		},
	}
}

type procsKey struct{}

type procs struct {
	mu sync.Mutex
	m  map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func procsOf(ts *testscript.TestScript) *procs { return ts.Value(procsKey{}).(*procs) }

// start starts prog (from $PATH) with the script's environment.
func start(ts *testscript.TestScript, stdout, stderr io.Writer, prog string, args ...string) *proc {
	path, err := exec.LookPath(prog)
	ts.Check(err)
	cmd := exec.Command(path, args...)
	cmd.Dir = ts.Getenv("PWD")
	cmd.Env = scriptEnv(ts)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ts.Check(cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	ts.Defer(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-p.done
			}
		}
	})
	return p
}

// scriptEnv is the script's environment, for processes the custom
// commands start.
func scriptEnv(ts *testscript.TestScript) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "POPPY_PROFILE", "NO_COLOR", "BROWSER",
		"POPPYTEST_ADDR", "POPPYTEST_PLAIN_ADDR", "POPPYTEST_CA", "POPPYTEST_HOSTS", "POPPYTEST_CLOCK_OFFSET", envControl, envAgentAddr,
		"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE"} {
		env = append(env, k+"="+ts.Getenv(k))
	}
	return env
}

func cmdFake(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: fake start|browse|user|code|violations")
	}
	control := ts.Getenv(envControl)
	post := func(path string) []byte {
		resp, err := http.Post(control+path, "", nil)
		ts.Check(err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if (resp.StatusCode != http.StatusOK) != neg {
			ts.Fatalf("fake %s: %d %s", args[0], resp.StatusCode, b)
		}
		return b
	}
	switch args[0] {
	case "start":
		pr, pw := io.Pipe()
		errf, err := os.Create(ts.MkAbs("fake.err"))
		ts.Check(err)
		ts.Defer(func() { errf.Close() })
		start(ts, pw, errf, "fakeco", args[1:]...)
		ts.Defer(func() { pw.Close() })
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		ready := false
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready = true
				break
			}
			var kv struct{ Name, Value string }
			ts.Check(json.Unmarshal(sc.Bytes(), &kv))
			ts.Setenv(kv.Name, kv.Value)
		}
		if !ready {
			ts.Fatalf("fakeco did not start")
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
	case "browse":
		if len(args) != 2 {
			ts.Fatalf("usage: fake browse URL")
		}
		b := post("/browse?url=" + url.QueryEscape(args[1]))
		ts.Logf("browse: %s", b)
	case "user":
		q := "/user?decision=" + args[1]
		if len(args) > 2 {
			q += "&scopes=" + url.QueryEscape(args[2])
		}
		post(q)
	case "code":
		resp, err := http.Get(control + "/code")
		ts.Check(err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ts.Setenv("CODE", string(b))
	case "violations":
		resp, err := http.Get(control + "/violations")
		ts.Check(err)
		var vs []string
		ts.Check(json.NewDecoder(resp.Body).Decode(&vs))
		resp.Body.Close()
		if len(vs) > 0 != neg {
			ts.Fatalf("protocol violations: %s", strings.Join(vs, "\n"))
		}
	default:
		ts.Fatalf("fake: unknown subcommand %q", args[0])
	}
}

func cmdSpawn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: spawn NAME PROG ARGS...")
	}
	out, err := os.Create(ts.MkAbs(args[0] + ".out"))
	ts.Check(err)
	errf, err := os.Create(ts.MkAbs(args[0] + ".err"))
	ts.Check(err)
	ts.Defer(func() { out.Close(); errf.Close() })
	p := start(ts, out, errf, args[1], args[2:]...)
	ps := procsOf(ts)
	ps.mu.Lock()
	ps.m[args[0]] = p
	ps.mu.Unlock()
}

func cmdAwait(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: await NAME [EXIT]")
	}
	want := 0
	if len(args) == 2 {
		want, _ = strconv.Atoi(args[1])
	}
	ps := procsOf(ts)
	ps.mu.Lock()
	p := ps.m[args[0]]
	ps.mu.Unlock()
	if p == nil {
		ts.Fatalf("await: no process %q", args[0])
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		ts.Fatalf("await %s: still running after 60 s", args[0])
	}
	got := 0
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		got = ee.ExitCode()
	} else if p.err != nil {
		ts.Fatalf("await %s: %v", args[0], p.err)
	}
	if got != want {
		b, _ := os.ReadFile(ts.MkAbs(args[0] + ".err"))
		ts.Fatalf("await %s: exit code %d, want %d; stderr:\n%s", args[0], got, want, b)
	}
}

func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: waitfor FILE REGEXP [VAR]")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		if m := re.FindSubmatch(b); m != nil {
			if len(args) == 3 && len(m) > 1 {
				ts.Setenv(args[2], string(m[1]))
			}
			return
		}
		select {
		case <-ctx.Done():
			ts.Fatalf("waitfor %s %q: not seen in 30 s; it holds:\n%s", args[0], args[1], b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cmdHelpAll checks every command of the tree (newRootCmd, cobra's help
// and completion included, hidden ones aside): "poppy CMD --help" has an
// Examples section that shows CMD, and a usage error (an unknown flag)
// exits 2 and names "poppy CMD --help", not the generic "poppy --help".
func cmdHelpAll(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: helpall")
	}
	root := newRootCmd(newApp(newInput(context.Background(), nil), io.Discard, io.Discard, nil))
	var paths [][]string
	eachCommand(root, func(c *cobra.Command) {
		if c.Hidden || strings.HasPrefix(c.Name(), "__") {
			return
		}
		paths = append(paths, strings.Fields(c.CommandPath())[1:])
	})
	if len(paths) < 20 {
		ts.Fatalf("helpall: only %d commands in the tree", len(paths))
	}
	run := func(args ...string) (string, string, int) {
		path, err := exec.LookPath("poppy")
		ts.Check(err)
		cmd := exec.Command(path, args...)
		cmd.Dir, cmd.Env = ts.Getenv("PWD"), scriptEnv(ts)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			ts.Check(err)
		}
		return out.String(), errOut.String(), code
	}
	for _, p := range paths {
		name := strings.Join(append([]string{"poppy"}, p...), " ")
		out, _, code := run(append(p, "--help")...)
		_, examples, ok := strings.Cut(out, "\nExamples:\n")
		if code != 0 || !ok {
			ts.Fatalf("%s --help: exit %d, no Examples section:\n%s", name, code, out)
		}
		examples, _, _ = strings.Cut(examples, "\n\n")
		if !strings.Contains(examples, name) {
			ts.Fatalf("%s --help: no example of %s:\n%s", name, name, examples)
		}
		_, errOut, code := run(append(p, "--no-such-flag")...)
		if code != exitUsage || !strings.Contains(errOut, "see: "+name+" --help") {
			ts.Fatalf("%s --no-such-flag: exit %d, want %d naming %q:\n%s", name, code, exitUsage, name+" --help", errOut)
		}
		if name != "poppy" && strings.Contains(errOut, "poppy --help") {
			ts.Fatalf("%s --no-such-flag: the generic help is named:\n%s", name, errOut)
		}
		ts.Logf("%s: examples and usage error ok", name)
	}
}

func cmdLoadEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: loadenv FILE")
	}
	for _, line := range strings.Split(ts.ReadFile(args[0]), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			ts.Setenv(k, shellUnquote(v))
		}
	}
}

func cmdHTTPGet(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: httpget URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	ts.Check(err)
	resp, err := http.DefaultTransport.RoundTrip(req) // no proxy: the URL is on loopback
	ts.Check(err)
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	ts.Check(err)
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("httpget %s: %s", args[0], resp.Status)
	}
	_, _ = ts.Stdout().Write(b)
}
