package main

// poppy init, poppy identity, poppy serve-identity: the agent's own
// identity (spec 4.1). Its client metadata document, JWKS and Direct
// Sign-In callback live under one base URL the user serves: poppy
// serve-identity answers on a local address behind their TLS reverse proxy
// (or with its own certificate), and a callback it receives completes a
// "poppy signin" waiting in another process, because the pending sign-in
// is in the keystore both share. serve-identity exchanges the callback's
// code at the Company itself, so it must reach the Company as signin does.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/signin"
)

type initOptions struct {
	app        *app
	BaseURL    string
	Name       string
	NameSet    bool
	LogoURI    string
	LogoURISet bool
	RotateKeys bool
}

func newCmdInit(a *app, runF func(context.Context, *initOptions) error) *cobra.Command {
	opts := &initOptions{app: a}
	cmd := &cobra.Command{
		Use:     "init --base-url URL",
		Short:   "Create or update the agent identity: signing keys and client metadata",
		GroupID: "agent",
		Long: `init creates the agent's identity, or updates it: a signing key kept in the
keystore (created once), and the client metadata served under --base-url:
  BASE/agent.json   the client_id (client metadata document)
  BASE/jwks.json    the public keys
  BASE/callback     the Direct Sign-In redirect URI
Serve them with "poppy serve-identity" behind your HTTPS reverse proxy.
--rotate-keys makes a new signing key and keeps the previous one published.

The keystore's directory must be yours alone: one that others can write is
made private (0700) when it is yours, and refused when it is not.`,
		Example: `  poppy init --base-url https://agent.example/poppy/ --name "Alice's agent"
  poppy init --rotate-keys
  poppy --state ./agent.db --json init --base-url https://agent.example/poppy/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.NameSet = cmd.Flags().Changed("name")
			opts.LogoURISet = cmd.Flags().Changed("logo-uri")
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runInit(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.BaseURL, "base-url", "", "the HTTPS URL under which agent.json, jwks.json and callback are served")
	cmd.Flags().StringVar(&opts.Name, "name", "", "the client_name Companies show on consent pages")
	cmd.Flags().StringVar(&opts.LogoURI, "logo-uri", "", "the logo_uri Companies show on consent pages")
	cmd.Flags().BoolVar(&opts.RotateKeys, "rotate-keys", false, "make a new signing key; the previous one stays published")
	return cmd
}

func runInit(ctx context.Context, opts *initOptions) error {
	a := opts.app
	store, err := a.openStore()
	if err != nil {
		return err
	}
	cfg, err := readIdentityConfig(ctx, store)
	if errors.Is(err, errNotInitialised) {
		if opts.BaseURL == "" {
			return usageError{err: errors.New("--base-url is required the first time")}
		}
		cfg, err = &identityConfig{Name: "poppy"}, nil
	}
	if err != nil {
		return err
	}
	if opts.BaseURL != "" {
		if cfg.BaseURL, err = normaliseBaseURL(opts.BaseURL); err != nil {
			return err
		}
	}
	if opts.NameSet {
		cfg.Name = opts.Name
	}
	if opts.LogoURISet {
		cfg.LogoURI = opts.LogoURI
	}
	var keys []*poppy.SigningKey
	if opts.RotateKeys {
		keys, err = poppy.RotateSigningKeys(ctx, store, signingKeysName)
	} else {
		keys, err = poppy.LoadSigningKeys(ctx, store, signingKeysName)
	}
	if err != nil {
		return err
	}
	id, err := cfg.identity(keys)
	if err != nil {
		return usageError{err: err}
	}
	if _, err := poppy.NewAgent(id, a.agentOptions(store)); err != nil {
		if strings.HasPrefix(cfg.BaseURL, "http://") && !a.allowLoopback {
			return &hintError{err: err, code: exitUsage,
				hint: "the protocol requires HTTPS; for an identity on this machine under development, add --unsafe-allow-loopback-http"}
		}
		return usageError{err: err}
	}
	if err := writeIdentityConfig(ctx, store, cfg); err != nil {
		return err
	}
	kids := make([]string, len(keys))
	for i, k := range keys {
		kids[i] = k.KeyID()
	}
	a.out.emit(map[string]any{"client_id": id.ClientID(), "jwks_uri": id.JWKSURI(), "redirect_uri": cfg.redirectURI(),
		"client_name": cfg.Name, "logo_uri": cfg.LogoURI, "signing_key": kids[0], "published_keys": kids, "rotated": opts.RotateKeys})
	a.out.printf("%s\n", a.out.green("Agent identity ready."))
	kv := []string{"client_id", id.ClientID(), "jwks_uri", id.JWKSURI(), "redirect_uri", cfg.redirectURI(), "signing key", kids[0]}
	if len(kids) > 1 {
		kv = append(kv, "also published", kids[1])
	}
	a.out.kv(kv...)
	a.out.printf("\nServe them at that URL: %s\n", a.cmdline("serve-identity"))
	return nil
}

type identityOptions struct {
	app *app
}

func newCmdIdentity(a *app, runF func(context.Context, *identityOptions) error) *cobra.Command {
	opts := &identityOptions{app: a}
	return &cobra.Command{
		Use:     "identity",
		Short:   "Print the client metadata document and the JWKS",
		GroupID: "agent",
		Example: `  poppy identity
  poppy --json identity | jq .metadata`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runIdentity(cmd.Context(), opts)
		},
	}
}

func runIdentity(ctx context.Context, opts *identityOptions) error {
	a := opts.app
	agent, err := a.loadAgent(ctx)
	if err != nil {
		return err
	}
	id := agent.Identity()
	a.out.emit(map[string]any{"client_id": id.ClientID(), "metadata": json.RawMessage(id.Metadata()), "jwks": json.RawMessage(id.JWKS())})
	a.out.printf("%s %s\n", a.out.bold("Client metadata at"), id.ClientID())
	a.out.printf("%s\n\n%s %s\n%s\n", indentJSON(id.Metadata()), a.out.bold("JWKS at"), id.JWKSURI(), indentJSON(id.JWKS()))
	return nil
}

func indentJSON(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

type serveIdentityOptions struct {
	app      *app
	Addr     string
	CertFile string
	KeyFile  string
	Reload   time.Duration
}

func newCmdServeIdentity(a *app, runF func(context.Context, *serveIdentityOptions) error) *cobra.Command {
	opts := &serveIdentityOptions{app: a}
	cmd := &cobra.Command{
		Use:     "serve-identity",
		Short:   "Serve agent.json, jwks.json and the Direct Sign-In callback",
		GroupID: "agent",
		Long: `serve-identity serves the agent's client metadata, its JWKS and the Direct
Sign-In callback on --addr: plain HTTP for a TLS reverse proxy in front of
it, or HTTPS with --tls-cert and --tls-key.

A callback it receives completes the "poppy signin" waiting for it, in any
process sharing the keystore: serve-identity itself exchanges the code at
the Company's token endpoint. So it must reach the Company as signin does:
run it with the same network settings (HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE
and DNS) and the same --state, --keyring and --profile. When it can't, the
waiting signin fails and says so.

Keys rotated with "poppy init --rotate-keys" are picked up within 10 s.
With --json it prints JSON Lines: {"event":"listening",...} and one
{"event":"callback","status":N} per sign-in callback.`,
		Example: `  poppy serve-identity --addr 127.0.0.1:8421 &
  poppy serve-identity --addr :8443 --tls-cert cert.pem --tls-key key.pem
  poppy --json serve-identity | tee identity.log`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (opts.CertFile == "") != (opts.KeyFile == "") {
				return usageError{err: errors.New("--tls-cert and --tls-key go together")}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServeIdentity(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Addr, "addr", "127.0.0.1:8421", "the address to listen on")
	cmd.Flags().StringVar(&opts.CertFile, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	cmd.Flags().StringVar(&opts.KeyFile, "tls-key", "", "the certificate's private key (PEM)")
	cmd.Flags().DurationVar(&opts.Reload, "reload-keys", 10*time.Second, "how often to pick up rotated keys from the keystore")
	_ = cmd.Flags().MarkHidden("reload-keys")
	return cmd
}

func runServeIdentity(ctx context.Context, opts *serveIdentityOptions) error {
	a := opts.app
	agent, err := a.loadAgent(ctx)
	if err != nil {
		return err
	}
	direct, err := signin.NewDirect(agent, nil)
	if err != nil {
		return err
	}
	id := agent.Identity()
	callback := direct.Handler()
	h := id.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		callback.ServeHTTP(sw, r)
		// The query holds the authorization code: never logged.
		a.out.emit(map[string]any{"event": "callback", "status": sw.status})
		if sw.status == http.StatusOK {
			a.out.printf("sign-in callback: completed\n")
		} else {
			a.out.printf("sign-in callback: refused (HTTP %d)\n", sw.status)
		}
	}))
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	a.out.emit(map[string]any{"event": "listening", "addr": ln.Addr().String(), "client_id": id.ClientID(),
		"jwks_uri": id.JWKSURI(), "redirect_uri": a.cfg.redirectURI(), "tls": opts.CertFile != ""})
	a.out.printf("Serving %s, %s and %s\non %s. Stop with Ctrl-C.\n", id.ClientID(), id.JWKSURI(), a.cfg.redirectURI(), ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	reloaded := make(chan struct{})
	go func() { reloadKeys(ctx, a, id, opts.Reload); close(reloaded) }()
	defer func() { cancel(); <-reloaded }() // before the keystore closes
	errc := make(chan error, 1)
	go func() {
		if opts.CertFile != "" {
			errc <- srv.ServeTLS(ln, opts.CertFile, opts.KeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		// A callback being handled finishes (its outcome is recorded for
		// the waiting signin); idle connections close at once.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	}
}

// reloadKeys picks up a key rotation made by another process.
func reloadKeys(ctx context.Context, a *app, id *poppy.Identity, every time.Duration) {
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if keys, err := poppy.LoadSigningKeys(ctx, a.store, signingKeysName); err == nil {
				_ = id.Rotate(keys...)
			}
		}
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
