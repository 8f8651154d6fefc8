package main

// poppy check: a Company's side of the protocol, checked from outside
// (package poppycheck). The check acts as a fresh agent identity of its
// own, whose documents it serves itself: on a loopback address by default
// (http://127.0.0.1:PORT/, which only a Company on this machine that
// accepts loopback http:// for development can fetch), behind the public
// https URL the user gives with --agent-url (a tunnel or a reverse proxy
// to --listen), or, with poppy fake's environment loaded, where the fake's
// --agent agent.test=http://127.0.0.1:8480 reaches it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/poppyproto/poppy/poppycheck"
)

type checkOptions struct {
	app    *app
	Domain string
	// Interactive walks a person through one sign-in of each type.
	Interactive bool
	// AgentURL is the public base URL of the check's identity; "" means
	// the loopback address it listens on (or, with poppy fake's
	// environment loaded, fakeAgentURL).
	AgentURL string
	// Listen is where the identity is served.
	Listen      string
	MaxRequests int
	Timeout     time.Duration
	// MaxTime bounds the whole run; 0 means poppycheck's default.
	MaxTime time.Duration
	// FailedSignIns makes up to 6 Mediated Sign-In attempts with made-up
	// credentials, to see the rate limit (CO-4.7-06).
	FailedSignIns bool
	// CAFile is a PEM file of certificate authorities to trust besides
	// the system's.
	CAFile string
	// AllowNetworks are networks (or addresses) the check may connect to
	// although they aren't public.
	AllowNetworks []string
	// JUnit is where a JUnit XML report goes.
	JUnit string
	// Baseline is a file of the rules the Company is known to fail.
	Baseline string
	// Only are the rules or sections the report keeps.
	Only []string
	// In is where an interactive run reads the person's answers.
	In io.Reader

	// listenSet says --listen was given.
	listenSet bool
	// fakeListen, for tests, replaces fakeListen.
	fakeListen string
	// httpClient, for tests, replaces the client.
	httpClient *http.Client
}

// Against poppy fake: with its environment loaded (POPPY_FAKE_DOMAIN), and
// neither --agent-url nor --listen given, the check serves its identity
// at fakeAgentURL from fakeListen, which poppy fake --agent
// agent.test=http://127.0.0.1:8480 reaches: the pair docs/check.md
// documents, so that "poppy check" needs no flag there.
const (
	fakeAgentURL = "https://agent.test/"
	fakeListen   = "127.0.0.1:8480"
)

func newCmdCheck(a *app, runF func(context.Context, *checkOptions) error) *cobra.Command {
	opts := &checkOptions{app: a}
	cmd := &cobra.Command{
		Use:   "check [DOMAIN]",
		Short: "Check a Company's side of the protocol from outside, rule by rule",
		Long: `check runs every step an agent can take at the Company without a User
(discovery and its redirects, organization.domain, the version, the OAuth
metadata and its exact issuer, poppy_domains, a Session and its renewal,
DPoP and nonces, the error challenges, every listed API, the conversation
endpoint, the operations endpoint, the browser-session endpoint) and
reports each Company rule (CO-…) as passed, failed (with the rule's text,
the request, the answer and the claims of what the check signed) or not
observed (with why). With --interactive it also asks you to sign in once
with each type the Company offers, then checks the Account Token, its
rotation and sign-out; what you type never appears in the report. With
--failed-sign-ins it makes, last, up to 6 Mediated Sign-In attempts within a
minute with credentials it makes up (naming no account), to see them
refused with 429 and Retry-After; it is off by default, since a Company may
count those failures against the address you run from.

DOMAIN is the Company's domain (example.com), with a port when its
well-known URL has one (127.0.0.1:7790, dev.example.com:8443), or an
https:// URL of either. A Company on this machine needs
--unsafe-allow-loopback-http (which also allows http://127.0.0.1:7790), one
on a private network --allow-network, one with a CA of its own --ca-file:
the check connects only where an agent of the SDK would. Without DOMAIN,
with poppy fake's environment loaded, it checks the fake.

It acts as a fresh agent identity of its own (never your poppy init one,
and a new client_id each run), whose client metadata the Company must
fetch: by default it serves it on a loopback address, which only a Company
on this machine can reach; give --agent-url with a public https URL that
reaches --listen (a tunnel or a reverse proxy) for a Company elsewhere.
Against poppy fake, start the fake with --agent agent.test=http://127.0.0.1:8480
and load its environment: the check then serves its identity there by
itself. It sends only what a correct agent sends, at most --max-requests
requests, each within --timeout, the whole run within --max-time, and
prints no secret: tokens, proofs and codes appear as fingerprints.

In a CI: --junit FILE writes a JUnit report; --baseline FILE lists the rules
the Company is known to fail (one ID a line, # comments), which then don't
fail the run, while a listed rule that passes does (a stale entry: remove
it); --only keeps some rules or sections (CO-4.3-02, 4.3, OPS6).

Exit codes: 0 no rule failed (beyond the baseline), 1 a rule failed, a
baseline entry is stale, or the check could not run, 2 usage error (the
check refusing an address or a certificate is one: it names the flag).
docs/check.md lists the rules it checks and what it can't see.`,
		Example: `  poppy check example.com --agent-url https://check.example.net/ --listen 127.0.0.1:8480
  poppy --unsafe-allow-loopback-http check 127.0.0.1:7790 --ca-file dev-ca.pem
  poppy check example.com --agent-url https://check.example.net/ --junit check.xml --baseline known-failures.txt
  poppy check example.com --agent-url https://check.example.net/ --only 4.3 --only CO-7.5-03
  poppy fake --agent agent.test=http://127.0.0.1:8480 --env-file fake.env &   # then, with fake.env loaded:
  poppy check`,
		GroupID: "company",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Domain = args[0]
			}
			opts.In = cmd.InOrStdin()
			opts.listenSet = cmd.Flags().Changed("listen")
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
	f.DurationVar(&opts.MaxTime, "max-time", 0, "the longest the whole run may take (default 5m, 30m with --interactive)")
	f.StringVar(&opts.CAFile, "ca-file", "", "also trust the certificate authorities in this PEM file (a Company with a CA of its own)")
	f.StringArrayVar(&opts.AllowNetworks, "allow-network", nil, "connect to this network although it isn't public, such as 10.0.0.0/8 (repeatable)")
	f.StringVar(&opts.JUnit, "junit", "", "write a JUnit XML report to this file")
	f.StringVar(&opts.Baseline, "baseline", "", "a file of the rules the Company is known to fail (one ID a line)")
	f.StringSliceVar(&opts.Only, "only", nil, "report only these rules or sections (CO-4.3-02, 4.3, OPS6; repeatable)")
	return cmd
}

// errRulesFailed is the outcome of a check that found a broken rule.
var errRulesFailed = errors.New("poppy: the Company failed")

func runCheck(ctx context.Context, opts *checkOptions) error {
	a := opts.app
	if opts.MaxRequests <= 0 || opts.Timeout <= 0 || opts.MaxTime < 0 {
		return usageError{err: errors.New("--max-requests, --timeout and --max-time must be positive")}
	}
	fake := a.env.getenv("POPPY_FAKE_DOMAIN")
	if opts.Domain == "" {
		if fake == "" {
			return usageError{err: errors.New("poppy check: name the Company's domain (or load poppy fake's environment to check the fake)")}
		}
		opts.Domain = fake
	}
	if strings.HasPrefix(strings.ToLower(opts.Domain), "http://") && !a.allowLoopback {
		return usageError{err: fmt.Errorf("%s: the protocol is https only; http:// to this machine, for development, needs --unsafe-allow-loopback-http", opts.Domain)}
	}
	if err := poppycheck.CheckOnly(opts.Only); err != nil {
		return usageError{err: fmt.Errorf("--only: %w", err)}
	}
	copts := &poppycheck.Options{MaxRequests: opts.MaxRequests, RequestTimeout: opts.Timeout, MaxDuration: opts.MaxTime, Logger: a.log,
		FailedSignIns: opts.FailedSignIns, UnsafeAllowLoopbackHTTP: a.allowLoopback, Only: opts.Only, HTTPClient: opts.httpClient}
	for _, n := range opts.AllowNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			addr, aerr := netip.ParseAddr(n)
			if aerr != nil {
				return usageError{err: fmt.Errorf("--allow-network %q: want a network such as 10.0.0.0/8, or an address", n)}
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		copts.AllowNetworks = append(copts.AllowNetworks, p.Masked())
	}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return usageError{err: fmt.Errorf("--ca-file: %w", err)}
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return usageError{err: fmt.Errorf("--ca-file %s: no PEM certificate in it", opts.CAFile)}
		}
		copts.RootCAs = pool
	}
	var baseline *poppycheck.Baseline
	if opts.Baseline != "" {
		f, err := os.Open(opts.Baseline)
		if err != nil {
			return usageError{err: fmt.Errorf("--baseline: %w", err)}
		}
		baseline, err = poppycheck.ParseBaseline(f)
		f.Close()
		if err != nil {
			return usageError{err: fmt.Errorf("--baseline %s: %w", opts.Baseline, err)}
		}
	}
	listen, agentURL := opts.Listen, opts.AgentURL
	if fake != "" && agentURL == "" && !opts.listenSet && hostOnly(opts.Domain) == fake {
		listen, agentURL = fakeListen, fakeAgentURL
		if opts.fakeListen != "" {
			listen = opts.fakeListen
		}
		a.out.warn("poppy check: poppy fake's environment is loaded: the check's identity is at " + fakeAgentURL + ", served from " + listen + ", which poppy fake --agent agent.test=http://" + listen + " reaches")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return usageError{err: fmt.Errorf("--listen %s: %w", listen, err)}
	}
	base := agentURL
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
	copts.Agent = agent
	if opts.Interactive {
		copts.Person = &terminalPerson{in: bufio.NewReader(opts.In), file: opts.In, out: a.out.prompt()}
	}
	rep, err := poppycheck.Run(ctx, opts.Domain, copts)
	var nr *poppycheck.NotReachedError
	switch {
	case errors.As(err, &nr):
		return usageError{err: err, hint: notReachedHint(nr)}
	case err != nil:
		return usageError{err: err}
	}
	if opts.JUnit != "" {
		var buf bytes.Buffer
		if err := rep.WriteJUnit(&buf, baseline); err != nil {
			return err
		}
		if err := os.WriteFile(opts.JUnit, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("poppy: --junit: %w", err)
		}
	}
	verdict := rep.Judge(baseline)
	if rep.OtherVersion != "" {
		// One line, not a table of rules that don't apply.
		a.out.emit(rep)
		return &hintError{err: fmt.Errorf("poppy check: %s", rep.Aborted), code: exitError, hint: "this poppy knows protocol version 0.1; a newer poppy may know " + rep.OtherVersion}
	}
	if a.out.json {
		if baseline != nil {
			a.out.emit(struct {
				*poppycheck.Report
				Baseline poppycheck.Verdict `json:"baseline"`
			}{rep, verdict})
		} else {
			a.out.emit(rep)
		}
	} else if !rep.IdentityRefused { // nothing was checked: the error says why, and what to do
		if err := rep.WriteTable(a.stdout); err != nil {
			return err
		}
		if baseline != nil {
			writeVerdict(a.stdout, opts.Baseline, verdict)
		}
	}
	switch {
	case rep.IdentityRefused:
		return &hintError{err: errors.New("poppy check: the Company refused the check's identity (invalid_client): it could not fetch " + rep.ClientID), code: exitError,
			hint: identityHint(opts.Domain, agentURL, ln.Addr().String(), fake)}
	case len(verdict.Failed) > 0:
		hint := "each failure above names the rule, the request and the answer"
		if len(verdict.Expected) > 0 {
			hint += " (" + fmt.Sprint(len(verdict.Expected)) + " more are in the baseline)"
		}
		return &hintError{err: fmt.Errorf("%w %d rule(s)", errRulesFailed, len(verdict.Failed)), code: exitError, hint: hint}
	case len(verdict.Stale) > 0:
		return &hintError{err: fmt.Errorf("poppy check: the baseline lists %d rule(s) the Company now keeps: %s", len(verdict.Stale), strings.Join(verdict.Stale, ", ")), code: exitError,
			hint: "remove them from " + opts.Baseline + ": a baseline only shrinks"}
	case rep.Aborted != "":
		return &hintError{err: errors.New("poppy: the check stopped early: " + rep.Aborted), code: exitError}
	}
	return nil
}

// writeVerdict says, after the table, what the baseline made of the run.
func writeVerdict(w io.Writer, file string, v poppycheck.Verdict) {
	fmt.Fprintf(w, "\nBaseline %s: ", esc(file))
	parts := []string{fmt.Sprintf("%d expected failure(s)", len(v.Expected))}
	if len(v.Expected) > 0 {
		parts[0] += " (" + strings.Join(v.Expected, ", ") + ")"
	}
	parts = append(parts, fmt.Sprintf("%d failure(s) it doesn't list", len(v.Failed)))
	if len(v.Stale) > 0 {
		parts = append(parts, fmt.Sprintf("%d stale entr(ies), rules the Company now keeps: %s", len(v.Stale), strings.Join(v.Stale, ", ")))
	}
	fmt.Fprintln(w, strings.Join(parts, "; ")+".")
}

// notReachedHint names the flag that allows what the check refused.
func notReachedHint(e *poppycheck.NotReachedError) string {
	switch {
	case e.UnknownAuthority:
		return "if the Company's certificate is from a CA of its own (development, a private network), give that CA's certificate with --ca-file FILE.pem"
	case e.Loopback:
		return "for a Company under development on this machine, add --unsafe-allow-loopback-http (poppy --unsafe-allow-loopback-http check …)"
	case e.Addr.IsValid():
		return "for a Company on a private network, add --allow-network " + netip.PrefixFrom(e.Addr, e.Addr.BitLen()).String() + " (or its whole network, such as 10.0.0.0/8)"
	}
	return "for a Company on a private network, add --allow-network with its network"
}

// identityHint says how to make the check's identity reachable, with the
// exact flags.
func identityHint(domain, agentURL, listen, fake string) string {
	fakeLine := "against poppy fake: start it with --agent agent.test=http://" + fakeListen + ", load its environment (set -a; . ./fake.env; set +a) and run: poppy check"
	if agentURL == "" {
		return "the check's identity was served on loopback http://, which only a Company on this machine that allows it can fetch: give --agent-url, a public https URL that reaches --listen (a tunnel or a reverse proxy); " + fakeLine
	}
	if fake != "" && hostOnly(domain) == fake {
		return "poppy fake must reach " + agentURL + " at " + listen + ": start it with --agent " + hostOnly(agentURL) + "=http://" + listen
	}
	return "check that " + agentURL + " reaches this machine at " + listen + " (--listen), from where the Company fetches; " + fakeLine
}

// hostOnly is the host of a domain argument or URL, without port.
func hostOnly(s string) string {
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
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
