package main

// poppy check: a Company's side of the protocol, checked from outside
// (package poppycheck). The check acts as a fresh agent identity of its
// own, whose documents it serves itself: on a loopback address by default
// (http://127.0.0.1:PORT/, which only a Company on this machine that
// accepts loopback http:// for development can fetch), or behind the
// public https URL the user gives with --agent-url (a tunnel or a reverse
// proxy to --listen).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppycheck"
)

type checkOptions struct {
	app    *app
	Domain string
	// Interactive walks a person through one sign-in of each type.
	Interactive bool
	// AgentURL is the public base URL of the check's identity; "" means
	// the loopback address it listens on.
	AgentURL string
	// Listen is where the identity is served.
	Listen      string
	MaxRequests int
	Timeout     time.Duration
	// FailedSignIns makes up to 6 Mediated Sign-In attempts with made-up
	// credentials, to see the rate limit (CO-4.7-06).
	FailedSignIns bool
	// In is where an interactive run reads the person's answers.
	In io.Reader

	// httpClient, for tests, replaces the client.
	httpClient *http.Client
}

func newCmdCheck(a *app, runF func(context.Context, *checkOptions) error) *cobra.Command {
	opts := &checkOptions{app: a}
	cmd := &cobra.Command{
		Use:   "check DOMAIN",
		Short: "Check a Company's side of the protocol from outside, rule by rule",
		Long: `check runs every step an agent can take at the Company without a User
(discovery and its redirects, organization.domain, the version, the OAuth
metadata and its exact issuer, poppy_domains, a Session and its renewal,
DPoP and nonces, the error challenges, every listed API, the conversation
endpoint, the operations endpoint, the browser-session endpoint) and
reports each Company rule (CO-…) as passed, failed (with the rule's text,
the request and the answer) or not observed (with why). With --interactive
it also asks you to sign in once with each type the Company offers, then
checks the Account Token, its rotation and sign-out. With --failed-sign-ins
it makes, last, up to 6 Mediated Sign-In attempts within a minute with
credentials it makes up (naming no account), to see them refused with 429
and Retry-After; it is off by default, since a Company may count those
failures against the address you run from.

It acts as a fresh agent identity of its own (never your poppy init one),
whose client metadata the Company must fetch: by default it serves it on
a loopback address, which only a Company on this machine can reach; give
--agent-url with a public https URL that reaches --listen (a tunnel or a
reverse proxy) for a Company elsewhere. It sends only what a correct agent
sends, at most --max-requests requests, and prints no secret: tokens,
proofs and codes appear as fingerprints.

Exit codes: 0 no rule failed, 1 a rule failed or the check could not run,
2 usage error. docs/check.md lists the rules it checks and what it can't see.`,
		Example: `  poppy check example.com --agent-url https://check.example.net/ --listen 127.0.0.1:8480
  poppy --json check example.com --agent-url https://check.example.net/ > report.json
  poppy check example.test --interactive --agent-url https://agent.test/ --listen 127.0.0.1:8480`,
		GroupID: "company",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			opts.In = cmd.InOrStdin()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runCheck(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.Interactive, "interactive", false, "sign in once with each type the Company offers (you do it in your browser or here)")
	f.StringVar(&opts.AgentURL, "agent-url", "", "the public https base URL where the Company reaches the check's identity (served at --listen)")
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:0", "where to serve the check's identity")
	f.BoolVar(&opts.FailedSignIns, "failed-sign-ins", false, "make up to 6 Mediated Sign-In attempts with made-up credentials, to see that the Company rate-limits them (CO-4.7-06)")
	f.IntVar(&opts.MaxRequests, "max-requests", 400, "the most requests the check sends")
	f.DurationVar(&opts.Timeout, "timeout", 20*time.Second, "the longest one request may take")
	return cmd
}

// errRulesFailed is the outcome of a check that found a broken rule.
var errRulesFailed = errors.New("poppy: the Company failed")

func runCheck(ctx context.Context, opts *checkOptions) error {
	a := opts.app
	if opts.MaxRequests <= 0 || opts.Timeout <= 0 {
		return usageError{err: errors.New("--max-requests and --timeout must be positive")}
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return usageError{err: fmt.Errorf("--listen %s: %w", opts.Listen, err)}
	}
	base := opts.AgentURL
	if base == "" {
		base = "http://" + ln.Addr().String() + "/"
		a.out.warn("poppy check: the check's identity is at " + base + ", which only a Company on this machine that accepts loopback http:// can fetch; give --agent-url for any other")
	}
	agent, err := poppycheck.NewAgent(base)
	if err != nil {
		ln.Close()
		return usageError{err: err}
	}
	hs := &http.Server{Handler: agent.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	hc := opts.httpClient
	if hc == nil {
		hc = poppy.DefaultHTTPClient()
		if a.allowLoopback {
			// The SDK's own client, relaxed for loopback as the flag asks.
			id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "https://localhost/agent.json", Keys: []*poppy.SigningKey{mustKey()}})
			if err == nil {
				if ag, err := poppy.NewAgent(id, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: true}); err == nil {
					hc = ag.HTTPClient()
				}
			}
		}
	}
	copts := &poppycheck.Options{Agent: agent, HTTPClient: hc, MaxRequests: opts.MaxRequests, RequestTimeout: opts.Timeout, Logger: a.log, FailedSignIns: opts.FailedSignIns}
	if opts.Interactive {
		copts.Person = &terminalPerson{in: bufio.NewReader(opts.In), file: opts.In, out: a.out.prompt()}
	}
	rep, err := poppycheck.Run(ctx, opts.Domain, copts)
	if err != nil {
		return usageError{err: err}
	}
	if a.out.json {
		a.out.emit(rep)
	} else if err := rep.WriteTable(a.stdout); err != nil {
		return err
	}
	if n := rep.Count(poppycheck.Failed); n > 0 {
		return &hintError{err: fmt.Errorf("%w %d rule(s)", errRulesFailed, n), code: exitError, hint: "each failure above names the rule, the request and the answer"}
	}
	if rep.Aborted != "" {
		return &hintError{err: errors.New("poppy: the check stopped early: " + rep.Aborted), code: exitError}
	}
	return nil
}

func mustKey() *poppy.SigningKey {
	k, err := poppy.GenerateSigningKey()
	if err != nil {
		panic(err)
	}
	return k
}

// terminalPerson walks the person at the terminal through the sign-ins.
type terminalPerson struct {
	in   *bufio.Reader
	file io.Reader
	out  io.Writer
}

func (p *terminalPerson) Visit(_ context.Context, v poppycheck.Visit) error {
	switch v.Type {
	case "device":
		fmt.Fprintf(p.out, "\nDevice Sign-In (%s): open %s", esc(strings.Join(v.Scopes, " ")), esc(v.URL))
		if v.UserCode != "" {
			fmt.Fprintf(p.out, " and enter the code %s", esc(v.UserCode))
		}
		fmt.Fprintf(p.out, ", then sign in and approve. Waiting…\n")
	default:
		fmt.Fprintf(p.out, "\nDirect Sign-In (%s): open this link in your browser, sign in and approve:\n  %s\nWaiting for the Company to send you back…\n", esc(strings.Join(v.Scopes, " ")), esc(v.URL))
	}
	return nil
}

func (p *terminalPerson) Ask(ctx context.Context, q poppycheck.Question) (string, error) {
	label := q.Label
	if q.Name == "code" {
		label = "One-time code"
		if q.SentTo != "" {
			label += " (" + q.SentTo + ")"
		}
	} else {
		label = "Mediated Sign-In: " + label
	}
	fmt.Fprintf(p.out, "%s: ", esc(label))
	if f, ok := p.file.(*os.File); ok && q.Secret && term.IsTerminal(int(f.Fd())) {
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(p.out)
		return string(b), err
	}
	line, err := p.in.ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("poppy: no answer: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}
