// Command poppy is a Personal Agent on the command line: it acts for you at
// a Company through the Personal Agent Protocol (Poppy).
//
//	go install github.com/poppyproto/poppy/cmd/poppy@latest
//	poppy init --base-url https://agent.example/poppy/
//	poppy serve-identity &            # behind your TLS reverse proxy
//	poppy signin example.com
//	poppy status
//
// Every command takes --json, printing one JSON object (JSON Lines for
// commands that report progress, such as signin and serve-identity), never
// with colour or escape sequences. The shapes are documented in
// docs/cli.md and are stable: fields may be added, none removed or renamed.
//
// State lives in the SQLite keystore poppy/keystore.db under
// os.UserConfigDir (mode 0600, in a directory only you can write), or the
// file named by --state; with --keyring its secret records are sealed with
// a key kept in the OS keyring.
//
// Exit codes: 0 success, 1 error, 2 usage error, 3 sign-in needed (run the
// "poppy signin" the message names), 4 the User declined, 5 no answer (an
// operation was neither approved nor declined, and stays proposed), 130
// interrupted (Ctrl-C; 143 for SIGTERM). Ctrl-C stops any command at once:
// what it was waiting for is abandoned, what the keystore holds is kept; a
// second Ctrl-C while it cleans up stops it without waiting.
//
// The Company's name the command shows is organization.name of the
// poppy.json of the domain it was given. init puts client_id, jwks_uri and
// the redirect URI under one base URL, so they share the exact host, as
// both readings of A-02 require.
//
// The agent's client metadata lists the operations extension
// ({"operations": "1"}): the command asks the User itself before anything a
// Company proposes is confirmed (poppy ops confirm: a typed "yes" on the
// terminal, the --approve flag, or a standing permission covering every
// term). Only a typed "no" declines; no answer leaves the operation
// proposed. A stdin that is not a terminal never answers.
//
// The command is built only on the SDK's public packages: apis, api and mcp
// on package api, ops and permissions on package operations, browse on
// packages browser and browser/headless, chat on package conversation,
// mcp-server and ask on package llmtools.
//
// Each command follows one shape (as gh's pkg/cmd does): an options struct
// holding the app (the run's streams, global flags and lazily opened state)
// and the command's flags and arguments; a newCmdX(app, runF) that builds
// the cobra command filling it, calling runF instead of runX when a test
// gives one; and a runX(ctx, opts) with the logic, which tests call
// directly. The command tree is the list in commands (root.go).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/poppyproto/poppy"
)

func main() {
	ctx, stop := interruptible(os.Stderr, os.Stdin)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// environment is what a run takes from outside the command line. Nil
// fields mean the real thing.
type environment struct {
	getenv func(string) string
	// httpClient and clock, when set, are the Agent's (AgentOptions):
	// tests that call a runX directly give the fake Company's.
	httpClient *http.Client
	clock      poppy.Clock
}

// run runs one command line and returns its exit code. ctx ends when the
// run is interrupted, with an interruptError as its cause.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env *environment) int {
	if env == nil {
		env = &environment{}
	}
	if env.getenv == nil {
		env.getenv = os.Getenv
	}
	a := newApp(newInput(ctx, stdin), stdout, stderr, env)
	defer a.close()
	root := newRootCmd(a)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && a.out == nil {
		// The command line did not parse far enough for the flags to be
		// applied: honour --json all the same.
		for _, arg := range args {
			if arg == "--" {
				break
			}
			if arg == "--json" || arg == "--json=true" {
				a.jsonOut = true
			}
		}
	}
	return a.exit(ctx, cmd, err)
}

// interruptError is the cause of a run's context when a signal stops it.
type interruptError struct{ sig os.Signal }

// Error is the one word the command prints.
func (e interruptError) Error() string {
	if e.sig == syscall.SIGTERM {
		return "terminated"
	}
	return "interrupted"
}

// code is the exit code, 128 + the signal's number, as shells report it.
func (e interruptError) code() int {
	if e.sig == syscall.SIGTERM {
		return exitTerminated
	}
	return exitInterrupted
}

// interruptible returns the context of a run of main: the first SIGINT or
// SIGTERM cancels it, and the command stops what it waits for, keeps what
// the keystore holds, and exits with 130 (143). A second signal while it
// cleans up exits at once, as a crash would: the keystore survives that
// (SQLite's write-ahead log), and the terminal gets back the settings it
// had when the run began (echo, if a prompt for a secret had turned it
// off).
func interruptible(stderr io.Writer, stdin *os.File) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	restore := saveTerminal(stdin)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var first os.Signal
		select {
		case first = <-sigs:
		case <-done:
			return
		}
		ie := interruptError{first}
		cancel(ie)
		select {
		case <-sigs:
		case <-done:
			return
		}
		restore()
		fmt.Fprintln(stderr, ie.Error())
		os.Exit(ie.code())
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
		cancel(nil)
	}
}
