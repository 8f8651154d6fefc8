// Command cli is a script that acts for its user at a Company: it signs in
// once with Device Sign-In, keeps everything in the SQLite keystore in the
// user's config directory, and on every later run reuses that sign-in
// without asking again.
//
//	go run ./examples/cli -client-id https://agent.example/poppy/agent.json -domain example.com
//
// The script's identity. A Company fetches the agent's client metadata
// from its client_id URL and its public keys from the jwks_uri beside it
// (spec 4.1), so both must be served over HTTPS at a URL the script's
// operator controls: "poppy serve-identity", or any server mounting
// poppy.Identity.Handler, run behind the operator's TLS reverse proxy,
// loading the same keys from the same keystore. The script creates its
// signing key the first time with poppy.LoadSigningKeys and reuses it on
// every run; poppy.RotateSigningKeys makes a new one and keeps the
// previous one published.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/signin"
)

// Config is what one run needs. HTTPClient and Clock are nil in real runs;
// the test points them at a fake Company.
type Config struct {
	ClientID   string
	Domain     string
	User       string
	StorePath  string
	APIPath    string
	HTTPClient *http.Client
	Clock      poppy.Clock
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.ClientID, "client-id", "", "the agent's client_id URL (where its operator serves agent.json)")
	flag.StringVar(&cfg.Domain, "domain", "example.com", "the Company's domain")
	flag.StringVar(&cfg.User, "user", "", "the local user (default: the OS user)")
	flag.StringVar(&cfg.StorePath, "store", "", "the keystore file (default: poppy-cli-example/keystore.db in the user config dir)")
	flag.StringVar(&cfg.APIPath, "path", "/orders", "the API path to GET once signed in")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "cli:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg Config, out io.Writer, in io.Reader) error {
	if cfg.ClientID == "" {
		return errors.New("-client-id is required: the HTTPS URL of the agent's client metadata document")
	}
	if cfg.User == "" {
		u, err := user.Current()
		if err != nil {
			return err
		}
		cfg.User = u.Username
	}
	if cfg.StorePath == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return err
		}
		cfg.StorePath = filepath.Join(dir, "poppy-cli-example", "keystore.db")
	}
	store, err := sqlitestore.Open(cfg.StorePath, nil) // mode 0600, in a 0700 directory
	if err != nil {
		return err
	}
	defer store.Close()

	// The agent's signing key: created on the first run, loaded after.
	keys, err := poppy.LoadSigningKeys(ctx, store, "")
	if err != nil {
		return err
	}
	identity, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: cfg.ClientID, ClientName: "Example script", Keys: keys})
	if err != nil {
		return err
	}
	agent, err := poppy.NewAgent(identity, &poppy.AgentOptions{Store: store, HTTPClient: cfg.HTTPClient, Clock: cfg.Clock})
	if err != nil {
		return err
	}
	company, err := agent.Company(ctx, cfg.Domain)
	if err != nil {
		return err
	}
	sess, err := company.Session(ctx, cfg.User, nil)
	if err != nil {
		return err
	}
	// The first run asks the User; later runs find the stored Account
	// Token and don't.
	res, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, signin.TerminalPrompter(out, in))
	if err != nil {
		return err
	}
	// The Company's name is its text: %q prints it with every control
	// character escaped, so it can't drive the terminal.
	if res.Reused {
		fmt.Fprintf(out, "Signed in to %q already.\n", company.Name())
	} else {
		fmt.Fprintf(out, "Signed in to %q.\n", company.Name())
	}
	if cfg.APIPath == "" {
		return nil
	}
	// The API's base URL is the server URL of its OpenAPI description
	// (servers[0].url), which package api reads: never a guess from the
	// domain, since a Company may serve its API on any of its hosts.
	var base string
	for _, e := range api.List(company) {
		if e.Type != api.TypeOpenAPI {
			continue
		}
		oa, err := api.LoadOpenAPI(ctx, sess, e, nil)
		if err != nil {
			return err
		}
		base = oa.ServerURL()
		break
	}
	if base == "" {
		return nil // no OpenAPI API
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+cfg.APIPath, nil)
	if err != nil {
		return err
	}
	resp, err := sess.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := poppy.ResponseError(resp); err != nil {
		return err // a *poppy.Error: errors.Is(err, poppy.ErrSignInRequired), ...
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "GET %s: %d, %d bytes\n", cfg.APIPath, resp.StatusCode, len(b))
	return nil
}
