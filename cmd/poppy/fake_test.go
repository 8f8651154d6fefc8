package main

// fakeco: the fake Company as a command of its own, for the scripts. It
// starts a poppytest.Server, serves the agent host agent.test by proxying
// to the address where "poppy serve-identity" listens ($AGENT_ADDR, which
// it picks), and prints its environment as JSON Lines, then READY:
// Server.Env (HTTPS_PROXY and SSL_CERT_FILE, with which the unmodified
// poppy processes reach it, and the variables of poppytest.ClientFromEnv),
// the address of its control API, and AGENT_ADDR. The control API plays the
// User: /browse opens a sign-in page as the User's browser and follows the
// redirect back to the agent; /user programs the User's decisions;
// /violations lists the protocol violations the fake saw.
//
// fakebrowser: the $BROWSER the scripts give poppy: it asks the fake's
// control API to browse the URL it is given.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

const (
	envControl   = "POPPYFAKE_CONTROL"
	envAgentAddr = "AGENT_ADDR"
)

func fakeCompanyMain() int {
	fs := flag.NewFlagSet("fakeco", flag.ContinueOnError)
	interval := fs.Duration("device-interval", time.Second, "Device Sign-In poll interval")
	requireCode := fs.Bool("require-code", false, "Mediated Sign-In asks for a one-time code")
	rotate := fs.Bool("rotate", false, "rotate Account Tokens on every use")
	disable := fs.String("disable", "", "comma-separated sign-in types to leave out")
	resource := fs.String("api-resource", "", "the API's resource indicator (RFC 8707)")
	name := fs.String("name", "", "organization.name to serve, Go-quoted (so it may hold control characters)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	opts := &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceInterval: *interval, RequireCode: *requireCode, RotateAccountTokens: *rotate}, API: poppytest.OpenAPIServerOptions{Resource: *resource}}
	if *disable != "" {
		opts.SignIn.Disable = strings.Split(*disable, ",")
	}
	if *name != "" {
		n, err := strconv.Unquote(*name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakeco: -name must be Go-quoted")
			return 2
		}
		*name = n
		opts.Discovery.DocumentFields = map[string]any{"organization": map[string]any{"name": *name, "domain": "example.test"}}
	}
	srv, err := poppytest.New(opts) // a program of its own: New, not the test helper
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeco:", err)
		return 1
	}
	defer srv.Close()
	agentAddr, err := forwardAgent(srv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeco:", err)
		return 1
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeco:", err)
		return 1
	}
	control := &http.Server{Handler: controlHandler(srv), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = control.Serve(ln) }()
	defer control.Close()

	enc := json.NewEncoder(os.Stdout)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		_ = enc.Encode(map[string]string{"name": k, "value": v})
	}
	_ = enc.Encode(map[string]string{"name": envControl, "value": "http://" + ln.Addr().String()})
	_ = enc.Encode(map[string]string{"name": envAgentAddr, "value": agentAddr})
	// What a real Chromium needs to reach the fake and trust its key only
	// (poppy browse's hidden --unsafe-chromium-* flags).
	trust := srv.BrowserTrust()
	_ = enc.Encode(map[string]string{"name": "CHROMIUM_HOST_RULES", "value": trust.ChromiumHostRules()})
	_ = enc.Encode(map[string]string{"name": "CHROMIUM_SPKI", "value": trust.SPKI})
	fmt.Println("READY")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}

// newFake starts a fake Company for t whose agent host agent.test is
// forwarded to agentAddr (forwardAgent).
func newFake(t testing.TB, opts *poppytest.Options) (*poppytest.Server, string, error) {
	srv := poppytest.NewServer(t, opts)
	agentAddr, err := forwardAgent(srv)
	return srv, agentAddr, err
}

// forwardAgent forwards srv's agent host agent.test to agentAddr, a free
// loopback address for "poppy serve-identity", as the operator's TLS
// reverse proxy would.
func forwardAgent(srv *poppytest.Server) (agentAddr string, err error) {
	agentAddr, err = freeAddr()
	if err != nil {
		return "", err
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: agentAddr})
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	srv.HandleAgent("agent.test", proxy)
	return agentAddr, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func controlHandler(srv *poppytest.Server) http.Handler {
	mux := http.NewServeMux()
	// POST /browse?url=U: the User opens U (a sign-in page) in their
	// browser and decides; a redirect back to the agent is followed.
	mux.HandleFunc("POST /browse", func(w http.ResponseWriter, r *http.Request) {
		loc, err := srv.Browse(r.Context(), r.URL.Query().Get("url"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out := map[string]any{"redirected": loc != ""}
		if loc != "" {
			c := &http.Client{Transport: srv.Transport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, loc, nil)
			req.Header.Set("User-Agent", poppytest.BrowserUserAgent)
			resp, err := c.Do(req)
			if err != nil {
				http.Error(w, "following the redirect: "+err.Error(), http.StatusBadGateway)
				return
			}
			page, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			out["callback_status"] = resp.StatusCode
			out["callback_page"] = string(page)
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	// POST /user?decision=approve|deny|never[&scopes=a,b]
	mux.HandleFunc("POST /user", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch q.Get("decision") {
		case "approve":
			if s := q.Get("scopes"); s != "" {
				srv.SignIn().ApproveScopes("", strings.Split(s, ",")...)
			} else {
				srv.SignIn().ApproveAll("")
			}
		case "deny":
			srv.SignIn().Deny()
		case "never":
			srv.SignIn().NeverAnswer()
		default:
			http.Error(w, "decision must be approve, deny or never", http.StatusBadRequest)
		}
	})
	mux.HandleFunc("GET /violations", func(w http.ResponseWriter, _ *http.Request) {
		var out []string
		for _, v := range srv.Violations() {
			out = append(out, v.String())
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /code", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, srv.SignIn().LastCode())
	})
	return mux
}

// fakebrowser URL: the User's browser, as $BROWSER.
func fakeBrowserMain() int {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fakebrowser URL")
		return 2
	}
	base := os.Getenv(envControl)
	if base == "" {
		fmt.Fprintln(os.Stderr, "fakebrowser: no", envControl)
		return 1
	}
	resp, err := http.Post(base+"/browse?url="+url.QueryEscape(os.Args[1]), "", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakebrowser:", err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "fakebrowser: %d %s\n", resp.StatusCode, b)
		return 1
	}
	return 0
}
