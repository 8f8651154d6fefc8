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
// os.UserConfigDir (mode 0600), or the file named by --state; with
// --keyring its secret records are sealed with a key kept in the OS keyring.
//
// Exit codes: 0 success, 1 error, 2 usage error, 3 sign-in needed (run the
// "poppy signin" the message names), 4 the User declined.
//
// The Company's name the command shows is organization.name of the
// poppy.json of the domain it was given. init puts client_id, jwks_uri and
// the redirect URI under one base URL, so they share the exact host, as
// both readings of A-02 require.
//
// The agent's client metadata lists the operations extension
// ({"operations": "1"}): the command asks the User itself before anything a
// Company proposes is confirmed (poppy ops confirm: a typed "yes" on the
// terminal, or a standing permission covering every term; with --json, never
// an answer from a stdin that is not a terminal).
//
// The command is built only on the SDK's public packages: apis, api and mcp
// on package api, ops and permissions on package operations, browse on
// packages browser and browser/headless, chat on package conversation,
// mcp-server and ask on package llmtools. Each command group is one file,
// adding itself to the tree in newRootCmd.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, nil))
}

// environment is what a run takes from outside the command line. Nil
// fields mean the real thing.
type environment struct {
	getenv func(string) string
}

// run runs one command line and returns its exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, env *environment) int {
	if env == nil {
		env = &environment{}
	}
	if env.getenv == nil {
		env.getenv = os.Getenv
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := newApp(stdin, stdout, stderr, env)
	defer a.close()
	cmd := newRootCmd(a)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
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
	return a.exit(err)
}
