package main

// Exit codes and errors that say what to do next.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/signin"
)

// The exit codes, documented in the package doc, "poppy --help" and
// docs/cli.md.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitSignIn      = 3   // sign-in needed
	exitDeclined    = 4   // the User declined
	exitNoAnswer    = 5   // the User gave no answer: the operation stays proposed
	exitInterrupted = 130 // Ctrl-C (SIGINT)
	exitTerminated  = 143 // SIGTERM
)

// usageError is a command-line mistake: exit code 2. hint, when set, is
// the next step to suggest instead of the command's --help.
type usageError struct {
	err  error
	hint string
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// hintError carries the next step to suggest: a command line to run, and
// the exit code.
type hintError struct {
	err  error
	hint string // a poppy command line or a sentence
	code int
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

var errNotInitialised = errors.New("poppy: no agent identity in this keystore")

// signInHint makes err, a refusal that needs a sign-in at domain, say which
// "poppy signin" to run.
func (a *app) signInHint(err error, c *poppy.Company, domain string, scopes []string) error {
	var pe *poppy.Error
	if errors.As(err, &pe) && len(pe.Scope) > 0 {
		scopes = pe.Scope
	}
	if len(scopes) == 0 {
		scopes = []string{"poppy:read"}
	}
	args := []string{"signin", shellQuote(domain)}
	types := []string(nil)
	if pe != nil {
		types = pe.SignInTypes
	}
	if len(types) == 0 && c != nil {
		types = c.EligibleSignInTypes(scopes)
	}
	for _, m := range methodPreference {
		if slices.Contains(types, m) {
			args = append(args, "--method", m)
			break
		}
	}
	for _, s := range scopes {
		args = append(args, "--scope", shellQuote(s))
	}
	return &hintError{err: err, hint: "run: " + a.cmdline(args...), code: exitSignIn}
}

// annotationEndsOnSignal marks a command whose normal end is a signal
// (poppy fake): its exit status is what it returns, not 130.
const annotationEndsOnSignal = "poppy:ends-on-signal"

func endsOnSignal(cmd *cobra.Command) bool {
	return cmd != nil && cmd.Annotations[annotationEndsOnSignal] == "true"
}

// exit prints err, with what to do next, and returns the exit code. cmd is
// the command that ran (or failed to parse). A run that a signal stopped
// says so in one word and exits 130 (143 for SIGTERM), whatever the command
// returned, unless the command ends on a signal by design.
func (a *app) exit(ctx context.Context, cmd *cobra.Command, err error) int {
	if a.out == nil {
		a.out = newOutput(a.stdout, a.stderr, a.jsonOut, a.env.getenv)
	}
	var ie interruptError
	if errors.As(context.Cause(ctx), &ie) && !endsOnSignal(cmd) {
		if a.out.json {
			a.out.emit(map[string]any{"error": map[string]any{"message": ie.Error(), "code": ie.Error(), "exit_code": ie.code(), "hint": ""}})
		} else {
			nl := ""
			if a.out.errTTY {
				nl = "\n" // after the ^C the terminal echoed
			}
			fmt.Fprintln(a.stderr, nl+ie.Error())
		}
		return ie.code()
	}
	if err == nil {
		return exitOK
	}
	code, hint := exitError, ""
	var he *hintError
	var ue usageError
	switch {
	case errors.As(err, &he):
		code, hint = he.code, he.hint
	case errors.As(err, &ue) || isCobraUsage(err):
		code, hint = exitUsage, ue.hint
		if hint == "" {
			hint = "see: " + helpCommand(cmd)
		}
	case errors.Is(err, errNotInitialised):
		hint = "run: poppy init --base-url https://YOUR-HOST/poppy/ (then serve it with poppy serve-identity)"
	case errors.Is(err, signin.ErrAccessDenied):
		code = exitDeclined
	case errors.Is(err, poppy.ErrSignInRequired), errors.Is(err, poppy.ErrInsufficientScope), errors.Is(err, poppy.ErrNoAccountToken):
		code = exitSignIn
	case errors.Is(err, poppy.ErrInvalidClient):
		hint = "the Company refused the agent's identity: check that poppy serve-identity is reachable at the client_id URL (poppy identity shows it)"
	case errors.Is(err, poppy.ErrInsecureURL):
		hint = "the protocol requires HTTPS; --unsafe-allow-loopback-http allows http:// to this machine for development"
	case unresolvedTestName(err) != "":
		hint = unresolvedTestName(err) + " is a name for tests, which no DNS resolves: if it is poppy fake's Company, " +
			"load the environment poppy fake printed in this shell first (poppy fake --env-file fake.env, then: set -a; . ./fake.env; set +a)"
	}
	msg := err.Error()
	if a.out.json {
		a.out.emit(map[string]any{"error": map[string]any{"message": msg, "code": errorCode(err), "exit_code": code, "hint": hint}})
	} else {
		fmt.Fprintf(a.stderr, "%s %s\n", a.out.errStyle("error:"), esc(msg))
		if hint != "" {
			fmt.Fprintf(a.stderr, "%s\n", esc(hint))
		}
	}
	return code
}

// unresolvedTestName returns the host of err when it is a DNS "no such
// host" for a name reserved for tests (RFC 2606: .test, .example,
// .invalid), which resolves nowhere: most likely a Company of poppy fake
// (example.test) reached without the environment it prints, whose
// HTTPS_PROXY would have reached it. "" otherwise.
func unresolvedTestName(err error) string {
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		return ""
	}
	host := strings.ToLower(strings.TrimSuffix(de.Name, "."))
	for _, tld := range []string{"test", "example", "invalid"} {
		if host == tld || strings.HasSuffix(host, "."+tld) {
			return host
		}
	}
	return ""
}

// helpCommand is the "poppy … --help" of cmd, the command a usage error
// is about.
func helpCommand(cmd *cobra.Command) string {
	if cmd == nil {
		return "poppy --help"
	}
	return cmd.CommandPath() + " --help"
}

func (o *output) errStyle(s string) string {
	if !o.errTTY || !o.color {
		return s
	}
	return "\x1b[1;31m" + s + "\x1b[0m"
}

// errorCode is the protocol error code of err, or a short name of the
// command's own error, for --json.
func errorCode(err error) string {
	var pe *poppy.Error
	if errors.As(err, &pe) && pe.Code != "" {
		return pe.Code
	}
	switch {
	case errors.Is(err, signin.ErrAccessDenied):
		return "access_denied"
	case errors.Is(err, poppy.ErrNoAccountToken):
		return "no_account_token"
	case errors.Is(err, errNotInitialised):
		return "not_initialised"
	case errors.Is(err, errNoAnswer):
		return "no_answer"
	case errors.As(err, new(usageError)) || isCobraUsage(err):
		return "usage"
	}
	return "error"
}

// isCobraUsage recognises cobra's own command-line errors, which it returns
// as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p) {
			return true
		}
	}
	return false
}
