package main

// poppy fake: the fake Company of package poppytest as a process, for
// agents in any language. It listens on loopback, writes its CA
// certificate where the user says, prints the environment an agent needs
// (one NAME=value per line on stdout), and serves a page that shows, live,
// what the agent did and every rule it broke (fake_page.go).
//
// Options are poppytest.Options: a JSON file (--config) whose members are
// the Go field names, and a flag for every field of a simple type, named
// after its path (--misconfig.drop-organization, --web.same-site strict,
// --tokens.ttl 10m), described by the field's own documentation
// (fake_optiondoc.go, generated from package poppytest). Flags win over
// the file.
//
// With --run -- COMMAND, it runs the agent under test with the environment
// and stops when it ends: the exit status says whether the agent failed or
// broke a rule, for a CI, with --junit and --json reports.

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/poppyproto/poppy/poppytest"
)

type fakeOptions struct {
	app *app
	// ConfigFile is a JSON poppytest.Options.
	ConfigFile string
	// Set are the option flags given, by path ("Misconfig.DropOrganization").
	Set map[string]string
	// CAFile is where the CA certificate goes; "" means a file in a
	// temporary directory, removed at exit.
	CAFile string
	// EnvFile, if set, also gets the environment lines.
	EnvFile string
	// PageAddr is the page's loopback address.
	PageAddr string
	// Agents are HOST=URL: https://HOST/… is proxied to URL, an agent's
	// own server on loopback (its client metadata, JWKS, callback).
	Agents []string
	// Run is the agent's command line (after --run --); nil without
	// --run.
	Run []string
	// RunTimeout bounds the agent's run.
	RunTimeout time.Duration
	// JUnit, if set, gets a JUnit XML report when the fake stops.
	JUnit string

	// runMode is --run.
	runMode bool

	// ready, for tests, is called once the fake serves.
	ready func(*fakeRun)
}

// fakeRun is a started fake.
type fakeRun struct {
	Srv    *poppytest.Server
	Domain string
	Env    []string // NAME=value
	Page   string   // the page's URL
	CAFile string
}

func newCmdFake(a *app, runF func(context.Context, *fakeOptions) error) *cobra.Command {
	opts := &fakeOptions{app: a, Set: map[string]string{}}
	cmd := &cobra.Command{
		Use:   "fake [flags]",
		Short: "Run the fake Company for an agent in any language, with a live page of what it did wrong",
		Long: `fake runs the fake Company of package poppytest as a process, for an agent
written in any language: every host of the Company (example.test,
auth.example.test, api.example.test, …) on a loopback HTTPS listener reached
through an HTTPS proxy, with certificates from a CA of its own. It prints,
one NAME=value per line on stdout, the environment an agent needs to reach
it unmodified:

  HTTPS_PROXY, https_proxy   the fake's proxy (NO_PROXY, no_proxy emptied)
  SSL_CERT_FILE              the CA, for Go, OpenSSL (Python's ssl, httpx, Ruby)
  CURL_CA_BUNDLE             the CA, for curl
  REQUESTS_CA_BUNDLE         the CA, for Python requests
  NODE_EXTRA_CA_CERTS        the CA, for Node (NODE_USE_ENV_PROXY=1 makes its
                             fetch use HTTPS_PROXY)
  POPPY_FAKE_PAGE            the page that shows what the agent did
  POPPY_FAKE_DOMAIN          the Company's domain (example.test)

Load them with: set -a; . ./fake.env; set +a (with --env-file fake.env).

The agent's own documents (client metadata, JWKS, sign-in callback) must be
reachable by the fake: --agent agent.test=http://127.0.0.1:8080 serves
https://agent.test/ from the agent's local server. The client_id is then
https://agent.test/….

The page (POPPY_FAKE_PAGE) lists the requests, the Sessions, the
conversations and operations, and every rule the agent broke with its ID,
its text, the agent (client_id) and the Session, updating live; it shows
tokens, proofs and codes only as fingerprints. The same violations, oldest
first, are JSON at POPPY_FAKE_PAGE/violations?since=N (docs/cli.md gives
the schema).

Playing the User. You are the User: what you do is never held against the
agent. Requests to the sign-in pages (the authorization endpoint with its
consent form, the Device Sign-In page with its form) are yours unless they
carry what only the agent holds (a DPoP proof, an Authorization header, an
assertion), whatever browser or tool you use:
  - Device Sign-In: open the verification_uri_complete the agent shows you,
    in a browser that uses the proxy and trusts the CA, or with curl; the
    consent form's Account field takes an account of the fake (acct_1, the
    default when left empty); choose Allow or Decline.
  - Direct Sign-In: open the authorization URL the same way; Allow
    redirects to the agent's callback with the code.
  - Mediated Sign-In with a one-time code: the code the Company "sent you"
    is at POPPY_FAKE_PAGE/user/codes.
  - Without a browser: POST JSON to POPPY_FAKE_PAGE/user/sign-in, such as
    {"user_code":"ABCD-EFGH","decision":"approve","account":"acct_1"}, or
    {"url":"<the authorization URL>","decision":"deny"}; with
    "follow":true a Direct Sign-In's redirect is delivered to the agent.

In a CI: poppy fake [options] --run -- COMMAND [ARGS…] starts the fake, runs
COMMAND with the environment above added to its own (its output goes to
stderr), stops the fake when it ends, and exits 1 when the agent exited
non-zero or broke a rule, 0 otherwise. --junit FILE writes a JUnit report
(one test case for the agent's run, one for each rule it broke); --json
prints the ready line, each violation and the result as JSON lines.

Every other option changes the fake Company: how it answers, what it
requires, and, under --misconfig.*, a rule it breaks on purpose, to test
that the agent refuses it. The options can also be written in a JSON file
(--config, members named as the option's words in CamelCase, nested as the
dots say: {"Tokens": {"TTL": "10m"}}, durations as "90s").

Without --run it runs until Ctrl-C; then it prints the violations to stderr
and exits 1 if there were any.`,
		Example: `  poppy fake --ca-file ca.pem --env-file fake.env --agent agent.test=http://127.0.0.1:8080 &
  set -a; . ./fake.env; set +a
  curl https://example.test/.well-known/poppy.json
  poppy fake --agent agent.test=http://127.0.0.1:8080 --junit report.xml --run -- node agent.js
  poppy fake --tokens.require-nonce --conversations.streaming --page-addr 127.0.0.1:8700
  poppy fake --config fake.json --misconfig.organization-domain other.test`,
		GroupID: "company",
		Args: func(cmd *cobra.Command, args []string) error {
			if opts.runMode && (cmd.ArgsLenAtDash() != 0 || len(args) == 0) {
				return usageError{err: errors.New("--run needs the agent's command after --: poppy fake --run -- COMMAND [ARGS…]")}
			}
			if !opts.runMode && len(args) > 0 {
				return usageError{err: fmt.Errorf("unexpected %q: the agent's command goes after --run --", args[0])}
			}
			opts.Run = args
			return nil
		},
		// Ctrl-C (or SIGTERM) is how a fake is stopped, not an
		// interruption: its exit status says whether the agent broke a
		// rule (errors.go).
		Annotations: map[string]string{annotationEndsOnSignal: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runFake(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.ConfigFile, "config", "", "a JSON file of poppytest.Options (members named as the Go fields)")
	f.StringVar(&opts.CAFile, "ca-file", "", "write the CA certificate (PEM) here (default: a temporary file)")
	f.StringVar(&opts.EnvFile, "env-file", "", "also write the environment lines to this file")
	f.StringVar(&opts.PageAddr, "page-addr", "127.0.0.1:0", "the loopback address of the page")
	f.StringArrayVar(&opts.Agents, "agent", nil, "HOST=URL: serve https://HOST/ from the agent's loopback server at URL (repeatable)")
	f.BoolVar(&opts.runMode, "run", false, "run the agent's command given after --, then stop; exit 1 if it failed or broke a rule")
	f.DurationVar(&opts.RunTimeout, "run-timeout", 15*time.Minute, "with --run: stop the agent after this long (it then counts as failed)")
	f.StringVar(&opts.JUnit, "junit", "", "write a JUnit XML report here when the fake stops")
	addOptionFlags(f, opts.Set)
	return cmd
}

// addOptionFlags adds a flag for every poppytest.Options field of a
// simple type.
func addOptionFlags(f *pflag.FlagSet, set map[string]string) {
	eachOption(func(path string, field reflect.StructField) {
		usage, ok := flagUsage(field.Type)
		if !ok {
			return
		}
		fl := f.VarPF(&optionFlag{path: path, set: set, typ: field.Type}, optionFlagName(path), "", optionUsage(path)+usage)
		if field.Type.Kind() == reflect.Bool {
			fl.NoOptDefVal = "true"
		}
	})
}

// optionUsage is a flag's description: the documentation of its field
// (optionDoc, generated), or, for a field the generator has not seen, its
// path.
func optionUsage(path string) string {
	if d := optionDoc[path]; d != "" {
		return d
	}
	return "the fake's option " + path
}

// eachOption calls fn for every leaf field of poppytest.Options.
func eachOption(fn func(path string, f reflect.StructField)) {
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == t.PkgPath() {
				walk(prefix+f.Name+".", f.Type)
				continue
			}
			fn(prefix+f.Name, f)
		}
	}
	walk("", reflect.TypeOf(poppytest.Options{}))
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	sameSiteType = reflect.TypeOf(http.SameSite(0))
	performType  = reflect.TypeOf(poppytest.PerformMode(0))
)

func flagUsage(t reflect.Type) (string, bool) {
	switch {
	case t == durationType:
		return " (a duration, such as 90s)", true
	case t == sameSiteType:
		return " (lax, strict, none or default)", true
	case t == performType:
		return " (succeed, slow, fail-partway or unknown)", true
	case t.Kind() == reflect.Bool, t.Kind() == reflect.String, t.Kind() == reflect.Int:
		return "", true
	case t.Kind() == reflect.Slice && (t.Elem().Kind() == reflect.String || t.Elem().Kind() == reflect.Int):
		return " (comma-separated)", true
	}
	return "", false
}

// optionFlagName is the flag of a field path: Misconfig.DropOrganization
// is misconfig.drop-organization, Discovery.DropAPIs discovery.drop-apis,
// Tokens.TTL tokens.ttl, SignIn.Disable sign-in.disable.
func optionFlagName(path string) string {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		parts[i] = kebab(p)
	}
	return strings.Join(parts, ".")
}

func kebab(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			// An acronym ends before an upper-case letter that starts a
			// word ("APIResource"), unless what follows is a plural s
			// ("APIs").
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1]) && !(r[i+1] == 's' && (i+2 == len(r) || unicode.IsUpper(r[i+2])))
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('-')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// optionFlag records a flag's value; it is applied after the config file.
type optionFlag struct {
	path, val string
	set       map[string]string
	typ       reflect.Type
}

func (f *optionFlag) String() string { return f.val }
func (f *optionFlag) Type() string {
	switch {
	case f.typ == durationType:
		return "duration"
	case f.typ.Kind() == reflect.Bool:
		return "bool"
	case f.typ.Kind() == reflect.Int && f.typ != sameSiteType && f.typ != performType:
		return "int"
	case f.typ.Kind() == reflect.Slice:
		return "list"
	}
	return "string"
}

func (f *optionFlag) Set(s string) error {
	if _, err := parseOption(f.typ, s); err != nil {
		return err
	}
	f.val = s
	f.set[f.path] = s
	return nil
}

// parseOption reads a flag's text as a value of type t.
func parseOption(t reflect.Type, s string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	switch {
	case t == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return v, err
		}
		v.SetInt(int64(d))
	case t == sameSiteType:
		m := map[string]http.SameSite{"default": http.SameSiteDefaultMode, "lax": http.SameSiteLaxMode, "strict": http.SameSiteStrictMode, "none": http.SameSiteNoneMode}
		ss, ok := m[strings.ToLower(s)]
		if !ok {
			return v, fmt.Errorf("want lax, strict, none or default")
		}
		v.SetInt(int64(ss))
	case t == performType:
		m := map[string]poppytest.PerformMode{"succeed": poppytest.PerformSucceed, "slow": poppytest.PerformSlow, "fail-partway": poppytest.PerformFailPartway, "unknown": poppytest.PerformUnknown}
		pm, ok := m[strings.ToLower(s)]
		if !ok {
			return v, fmt.Errorf("want succeed, slow, fail-partway or unknown")
		}
		v.SetInt(int64(pm))
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return v, err
		}
		v.SetBool(b)
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return v, err
		}
		v.SetInt(int64(n))
	case t.Kind() == reflect.Slice:
		var items []string
		if s != "" {
			items = strings.Split(s, ",")
		}
		sl := reflect.MakeSlice(t, 0, len(items))
		for _, it := range items {
			e, err := parseOption(t.Elem(), strings.TrimSpace(it))
			if err != nil {
				return v, err
			}
			sl = reflect.Append(sl, e)
		}
		v.Set(sl)
	default:
		return v, fmt.Errorf("not settable from a flag")
	}
	return v, nil
}

// field finds the field of opts at path.
func field(opts *poppytest.Options, path string) reflect.Value {
	v := reflect.ValueOf(opts).Elem()
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// loadOptions reads a JSON poppytest.Options: members named as the Go
// fields (case-insensitively, as encoding/json does), durations as
// strings ("90s"), SameSite and PerformMode by name or number. Unknown
// members are an error.
func loadOptions(data []byte) (*poppytest.Options, error) {
	var raw any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	conv, err := convertDurations(raw, reflect.TypeOf(poppytest.Options{}), "")
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(conv)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var o poppytest.Options
	if err := dec.Decode(&o); err != nil {
		return nil, err
	}
	return &o, nil
}

// convertDurations rewrites, in a decoded JSON value meant for type t,
// the strings of time.Duration, SameSite and PerformMode fields as the
// numbers encoding/json expects.
func convertDurations(v any, t reflect.Type, path string) (any, error) {
	switch {
	case t == durationType || t == sameSiteType || t == performType:
		s, ok := v.(string)
		if !ok {
			if t == durationType {
				return nil, fmt.Errorf("%s: write a duration as a string, such as \"90s\"", path)
			}
			return v, nil
		}
		pv, err := parseOption(t, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		return pv.Int(), nil
	case t.Kind() == reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return v, nil
		}
		out := map[string]any{}
		for k, val := range m {
			f, ok := t.FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, k) })
			if !ok {
				return nil, fmt.Errorf("%s%s: poppytest.Options has no such field", path, k)
			}
			c, err := convertDurations(val, f.Type, path+f.Name+".")
			if err != nil {
				return nil, err
			}
			out[f.Name] = c
		}
		return out, nil
	case t.Kind() == reflect.Slice:
		a, ok := v.([]any)
		if !ok {
			return v, nil
		}
		out := make([]any, len(a))
		for i, e := range a {
			c, err := convertDurations(e, t.Elem(), path)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

// fakeServerOptions builds the Options from the file and the flags.
func (opts *fakeOptions) serverOptions() (*poppytest.Options, error) {
	o := &poppytest.Options{}
	if opts.ConfigFile != "" {
		b, err := os.ReadFile(opts.ConfigFile)
		if err != nil {
			return nil, usageError{err: err}
		}
		if o, err = loadOptions(b); err != nil {
			return nil, usageError{err: fmt.Errorf("--config %s: %w", opts.ConfigFile, err)}
		}
	}
	for path, s := range opts.Set {
		fv := field(o, path)
		pv, err := parseOption(fv.Type(), s)
		if err != nil {
			return nil, usageError{err: fmt.Errorf("--%s: %w", optionFlagName(path), err)}
		}
		fv.Set(pv)
	}
	return o, nil
}

func runFake(ctx context.Context, opts *fakeOptions) error {
	a := opts.app
	so, err := opts.serverOptions()
	if err != nil {
		return err
	}
	type agentProxy struct {
		host string
		to   *url.URL
	}
	var agents []agentProxy
	for _, spec := range opts.Agents {
		host, target, ok := strings.Cut(spec, "=")
		u, err := url.Parse(target)
		if !ok || host == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || !loopbackHost(u.Hostname()) || u.Port() == "" {
			return usageError{err: fmt.Errorf("--agent %q: want HOST=http://127.0.0.1:PORT (the agent's own server, on loopback)", spec)}
		}
		agents = append(agents, agentProxy{strings.ToLower(host), u})
	}
	if h, _, err := net.SplitHostPort(opts.PageAddr); err != nil || !loopbackHost(h) {
		return usageError{err: fmt.Errorf("--page-addr %q: the page listens on loopback only (it shows what agents sent)", opts.PageAddr)}
	}
	srv, err := poppytest.New(so)
	if err != nil {
		return usageError{err: err}
	}
	defer srv.Close()
	for _, ag := range agents {
		rp := httputil.NewSingleHostReverseProxy(ag.to)
		rp.ErrorLog = nil
		srv.HandleAgent(ag.host, rp)
	}
	proxy, err := srv.ProxyURL()
	if err != nil {
		return err
	}
	caFile := opts.CAFile
	if caFile == "" {
		dir, err := os.MkdirTemp("", "poppy-fake-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		caFile = filepath.Join(dir, "ca.pem")
	}
	if caFile, err = filepath.Abs(caFile); err != nil {
		return err
	}
	if err := os.WriteFile(caFile, srv.BrowserTrust().CAPEM, 0o644); err != nil {
		return fmt.Errorf("poppy: writing the CA certificate: %w", err)
	}
	ln, err := net.Listen("tcp", opts.PageAddr)
	if err != nil {
		return err
	}
	domain := strings.TrimPrefix(srv.URL(), "https://")
	page := &fakePage{srv: srv, domain: domain, proxy: proxy, addr: ln.Addr().String()}
	stopPage := servePage(ln, page)
	defer stopPage()
	pageLink := "http://" + ln.Addr().String() + "/"
	env := fakeEnv(proxy, caFile, pageLink, domain)
	lines := envLines(env)
	if opts.EnvFile != "" {
		if err := os.WriteFile(opts.EnvFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return fmt.Errorf("poppy: writing the environment: %w", err)
		}
	}
	if a.out.json {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		a.out.emit(map[string]any{"event": "ready", "domain": domain, "issuer": srv.Issuer(), "page": pageLink, "ca_file": caFile, "proxy": proxy, "env": m})
	} else if !opts.runMode {
		for _, kv := range lines {
			fmt.Fprintln(a.stdout, kv)
		}
	}
	if opts.runMode {
		fmt.Fprintf(a.stderr, "poppy fake: the Company %s is ready; the page is %s.\n", domain, pageLink)
	} else {
		fmt.Fprintf(a.stderr, "poppy fake: the Company %s is ready; the page is %s. Stop with Ctrl-C.\n", domain, pageLink)
	}
	if opts.ready != nil {
		opts.ready(&fakeRun{Srv: srv, Domain: domain, Env: lines, Page: pageLink, CAFile: caFile})
	}
	res := fakeResult{}
	if opts.runMode {
		res.ran = true
		res.exit, res.runErr = runAgent(ctx, a, opts, env)
	} else {
		<-ctx.Done()
	}
	res.violations = fakeViolations(srv, 0)
	return reportFake(a, opts, res)
}

// fakeResult is how a fake's run ended.
type fakeResult struct {
	ran        bool  // --run: an agent was run
	exit       int   // its exit code (-1: it never started or was stopped)
	runErr     error // why it never started, was stopped or failed
	violations []fakeViolation
}

// runAgent runs the agent's command with the fake's environment added to
// poppy's own, its output on poppy's stderr, and returns its exit code.
// Ctrl-C or --run-timeout stops it (it then counts as failed).
func runAgent(ctx context.Context, a *app, opts *fakeOptions, env []string) (int, error) {
	if opts.RunTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.RunTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, opts.Run[0], opts.Run[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = a.stderr, a.stderr
	// Stopped, it gets SIGTERM first, and 10 s to end before it is killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(a.stderr, "poppy fake: running the agent: %s\n", esc(strings.Join(opts.Run, " ")))
	err := cmd.Run()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return -1, fmt.Errorf("the agent did not end within --run-timeout %s and was stopped", opts.RunTimeout)
	case ctx.Err() != nil:
		return -1, errors.New("the agent was stopped (interrupted)")
	case err != nil && cmd.ProcessState == nil:
		return -1, fmt.Errorf("the agent could not be started: %w", err)
	case err != nil:
		return cmd.ProcessState.ExitCode(), fmt.Errorf("the agent exited with status %d", cmd.ProcessState.ExitCode())
	}
	return 0, nil
}

// A fakeViolation is a rule the agent broke, as the page's /violations,
// --json and the exit text show it. Its JSON is the stable schema
// documented in docs/cli.md: every member is always present.
type fakeViolation struct {
	// Seq numbers the violations from 1 in the order they were recorded;
	// /violations?since=N returns those with Seq > N.
	Seq  int    `json:"seq"`
	Rule string `json:"rule"` // the rule's ID, such as "PA-4.3-08"
	Text string `json:"text"` // the rule, in one line
	// Detail says what happened; it never holds a token, proof or code.
	Detail string `json:"detail"`
	// ClientID and SessionID name the agent and its Session ("" when the
	// request named none).
	ClientID  string `json:"client_id"`
	SessionID string `json:"session_id"`
	// Request is the index of the offending request (-1: none); Method and
	// URL are that request's, the URL without query or long path segments.
	Request int    `json:"request"`
	Method  string `json:"method"`
	URL     string `json:"url"`
}

// fakeViolations returns the violations recorded with Seq > since, oldest
// first. poppy fake never takes violations, so a violation's position in
// Server.Violations is stable.
func fakeViolations(srv *poppytest.Server, since int) []fakeViolation {
	vs := srv.Violations()
	out := []fakeViolation{}
	for i := max(since, 0); i < len(vs); i++ {
		v := vs[i]
		out = append(out, fakeViolation{Seq: i + 1, Rule: v.Rule, Text: ruleText[v.Rule], Detail: v.Detail,
			ClientID: v.ClientID, SessionID: v.SessionID, Request: v.Request, Method: v.Method, URL: pageURL(v.URL)})
	}
	return out
}

// agentOf names the agent of v for a line of text.
func (v fakeViolation) agentOf() string {
	switch {
	case v.ClientID != "" && v.SessionID != "":
		return fmt.Sprintf(" by %s, Session %s", v.ClientID, v.SessionID)
	case v.ClientID != "":
		return " by " + v.ClientID
	case v.SessionID != "":
		return " in Session " + v.SessionID
	}
	return ""
}

// reportFake prints, writes and returns how the run ended: the
// violations (stderr, and JSON lines with --json), the JUnit report, and
// the error that sets the exit status.
func reportFake(a *app, opts *fakeOptions, res fakeResult) error {
	vs := res.violations
	if a.out.json {
		for _, v := range vs {
			// The violation's members beside "event" (docs/cli.md).
			m := map[string]any{}
			b, _ := json.Marshal(v)
			_ = json.Unmarshal(b, &m)
			m["event"] = "violation"
			a.out.emit(m)
		}
		if res.ran {
			// With --run, a last line says how it ended.
			r := map[string]any{"event": "result", "violations": len(vs), "ok": len(vs) == 0 && res.runErr == nil, "agent_exit": res.exit}
			if res.runErr != nil {
				r["agent_error"] = res.runErr.Error()
			}
			a.out.emit(r)
		}
	}
	for _, v := range vs {
		fmt.Fprintf(a.stderr, "violation %s%s: %s (%s %s)\n", v.Rule, esc(v.agentOf()), esc(v.Detail), v.Method, esc(v.URL))
	}
	if opts.JUnit != "" {
		if err := os.WriteFile(opts.JUnit, junitReport(res), 0o644); err != nil {
			fmt.Fprintf(a.stderr, "poppy fake: writing the JUnit report: %v\n", err)
		}
	}
	switch {
	case res.runErr != nil && len(vs) > 0:
		return &hintError{err: fmt.Errorf("poppy: %v, and broke %d rule(s) of the protocol", res.runErr, len(vs)), code: exitError, hint: "the agent's output and the lines above say which"}
	case res.runErr != nil:
		return &hintError{err: fmt.Errorf("poppy: %w", res.runErr), code: exitError, hint: "the agent's output above says why"}
	case len(vs) > 0:
		return &hintError{err: fmt.Errorf("poppy: the agent broke %d rule(s) of the protocol", len(vs)), code: exitError, hint: "the page and the lines above say which"}
	}
	if res.ran {
		fmt.Fprintln(a.stderr, "poppy fake: the agent ran and broke no rule the fake checks")
	}
	return nil
}

// junitReport is the run as JUnit XML: a test case for the agent's run
// (with --run), and one for each rule broken, failed, with each
// violation of it.
func junitReport(res fakeResult) []byte {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Failure   *failure `xml:"failure,omitempty"`
	}
	type testsuite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	ts := testsuite{Name: "poppy fake"}
	if res.ran {
		tc := testcase{Name: "the agent's run", Classname: "poppy.fake"}
		if res.runErr != nil {
			tc.Failure = &failure{Message: res.runErr.Error()}
		}
		ts.Cases = append(ts.Cases, tc)
	}
	var order []string
	byRule := map[string][]fakeViolation{}
	for _, v := range res.violations {
		if byRule[v.Rule] == nil {
			order = append(order, v.Rule)
		}
		byRule[v.Rule] = append(byRule[v.Rule], v)
	}
	for _, rule := range order {
		var b strings.Builder
		for _, v := range byRule[rule] {
			fmt.Fprintf(&b, "%s%s (%s %s)\n", v.Detail, v.agentOf(), v.Method, v.URL)
		}
		ts.Cases = append(ts.Cases, testcase{Name: rule, Classname: "poppy.fake.rules",
			Failure: &failure{Message: rule + ": " + ruleText[rule], Text: b.String()}})
	}
	if len(ts.Cases) == 0 {
		ts.Cases = append(ts.Cases, testcase{Name: "no rule broken", Classname: "poppy.fake.rules"})
	}
	ts.Tests = len(ts.Cases)
	for _, c := range ts.Cases {
		if c.Failure != nil {
			ts.Failures++
		}
	}
	out, _ := xml.MarshalIndent(ts, "", "  ")
	return append([]byte(xml.Header), append(out, '\n')...)
}

// fakeEnv is the environment an agent in any language needs: the proxy
// (Go, curl, Python requests and httpx, Node with NODE_USE_ENV_PROXY) and
// the CA, in the variable each reads. Values are single lines, quoted for
// a POSIX shell where they need it.
func fakeEnv(proxy, caFile, page, domain string) []string {
	ca := caFile
	return []string{
		"HTTPS_PROXY=" + proxy,
		"https_proxy=" + proxy,
		"NO_PROXY=",
		"no_proxy=",
		"SSL_CERT_FILE=" + ca,
		"CURL_CA_BUNDLE=" + ca,
		"REQUESTS_CA_BUNDLE=" + ca,
		"NODE_EXTRA_CA_CERTS=" + ca,
		"NODE_USE_ENV_PROXY=1",
		"POPPY_FAKE_PAGE=" + page,
		"POPPY_FAKE_DOMAIN=" + domain,
	}
}

// envLines are env's NAME=value lines with each value quoted for a POSIX
// shell where it needs it (an empty value stays empty).
func envLines(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if v != "" {
			v = shellQuote(v)
		}
		out[i] = k + "=" + v
	}
	return out
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}
