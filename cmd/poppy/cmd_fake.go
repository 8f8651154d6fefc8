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
// --tokens.ttl 10m). Flags win over the file.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
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
		Long: `fake runs the fake Company of package poppytest as a process: every host of
the Company (example.test, auth.example.test, api.example.test, …) on a
loopback HTTPS listener reached through an HTTPS proxy, with certificates
from a CA of its own. It prints, one NAME=value per line on stdout, the
environment an agent needs to reach it unmodified:

  HTTPS_PROXY, https_proxy   the fake's proxy (NO_PROXY, no_proxy emptied)
  SSL_CERT_FILE              the CA, for Go, OpenSSL (Python's ssl, httpx, Ruby)
  CURL_CA_BUNDLE             the CA, for curl
  REQUESTS_CA_BUNDLE         the CA, for Python requests
  NODE_EXTRA_CA_CERTS        the CA, for Node (NODE_USE_ENV_PROXY=1 makes its
                             fetch use HTTPS_PROXY)
  POPPY_FAKE_PAGE            the page that shows what the agent did

Load them with: set -a; . ./fake.env; set +a (with --env-file fake.env).
The page lists the requests, the Sessions, the conversations and operations,
and every rule the agent broke with its ID and text, updating live; it shows
tokens, proofs and codes only as fingerprints.

The agent's own documents (client metadata, JWKS, sign-in callback) must be
reachable by the fake: --agent agent.test=http://127.0.0.1:8080 serves
https://agent.test/ from the agent's local server. The client_id is then
https://agent.test/….

Every field of poppytest.Options is an option: in a JSON file (--config,
members named as the Go fields, durations as "90s") or, for fields of a
simple type, as a flag named after its path (--misconfig.drop-organization,
--web.same-site strict). The Misconfig switches make the Company break a
rule, for testing that an agent refuses it.

It runs until Ctrl-C; then it prints the violations to stderr and exits 1 if
there were any.`,
		Example: `  poppy fake --ca-file ca.pem --env-file fake.env --agent agent.test=http://127.0.0.1:8080 &
  set -a; . ./fake.env; set +a
  curl https://example.test/.well-known/poppy.json
  poppy fake --tokens.require-nonce --conversations.streaming --page-addr 127.0.0.1:8700
  poppy fake --config fake.json --misconfig.organization-domain other.test`,
		GroupID: "company",
		Args:    cobra.NoArgs,
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
		fl := f.VarPF(&optionFlag{path: path, set: set, typ: field.Type}, optionFlagName(path), "", "poppytest.Options."+path+usage)
		if field.Type.Kind() == reflect.Bool {
			fl.NoOptDefVal = "true"
		}
	})
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
	if opts.EnvFile != "" {
		if err := os.WriteFile(opts.EnvFile, []byte(strings.Join(env, "\n")+"\n"), 0o644); err != nil {
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
	} else {
		for _, kv := range env {
			fmt.Fprintln(a.stdout, kv)
		}
	}
	fmt.Fprintf(a.stderr, "poppy fake: the Company %s is ready; the page is %s. Stop with Ctrl-C.\n", domain, pageLink)
	if opts.ready != nil {
		opts.ready(&fakeRun{Srv: srv, Domain: domain, Env: env, Page: pageLink, CAFile: caFile})
	}
	<-ctx.Done()
	vs := srv.Violations()
	if a.out.json {
		for _, v := range vs {
			a.out.emit(map[string]any{"event": "violation", "rule": v.Rule, "text": ruleText[v.Rule], "detail": v.Detail, "method": v.Method, "url": pageURL(v.URL)})
		}
	}
	for _, v := range vs {
		fmt.Fprintf(a.stderr, "violation %s: %s (%s %s)\n", v.Rule, esc(v.Detail), v.Method, esc(pageURL(v.URL)))
	}
	if len(vs) > 0 {
		return &hintError{err: fmt.Errorf("poppy: the agent broke %d rule(s) of the protocol", len(vs)), code: exitError, hint: "the page and the lines above say which"}
	}
	return nil
}

// fakeEnv is the environment an agent in any language needs: the proxy
// (Go, curl, Python requests and httpx, Node with NODE_USE_ENV_PROXY) and
// the CA, in the variable each reads. Values are single lines, quoted for
// a POSIX shell where they need it.
func fakeEnv(proxy, caFile, page, domain string) []string {
	ca := shellQuote(caFile)
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

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}
