package main

// poppy init, poppy identity, poppy serve-identity: the agent's own
// identity (spec 4.1). Its client metadata document, JWKS and Direct
// Sign-In callback live under one base URL the user serves: poppy
// serve-identity answers on a local address behind their TLS reverse proxy
// (or with its own certificate), and a callback it receives completes a
// "poppy signin" waiting in another process, because the pending sign-in
// is in the keystore both share.

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

func addIdentityCommands(root *cobra.Command, a *app) {
	root.AddCommand(newInitCmd(a), newIdentityCmd(a), newServeIdentityCmd(a))
}

func newInitCmd(a *app) *cobra.Command {
	var baseURL, name, logo string
	var rotate bool
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
--rotate-keys makes a new signing key and keeps the previous one published.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := a.openStore()
			if err != nil {
				return err
			}
			cfg, err := readIdentityConfig(ctx, store)
			if errors.Is(err, errNotInitialised) {
				if baseURL == "" {
					return usageError{errors.New("--base-url is required the first time")}
				}
				cfg, err = &identityConfig{Name: "poppy"}, nil
			}
			if err != nil {
				return err
			}
			if baseURL != "" {
				if cfg.BaseURL, err = normaliseBaseURL(baseURL); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("name") {
				cfg.Name = name
			}
			if cmd.Flags().Changed("logo-uri") {
				cfg.LogoURI = logo
			}
			var keys []*poppy.SigningKey
			if rotate {
				keys, err = poppy.RotateSigningKeys(ctx, store, signingKeysName)
			} else {
				keys, err = poppy.LoadSigningKeys(ctx, store, signingKeysName)
			}
			if err != nil {
				return err
			}
			id, err := cfg.identity(keys)
			if err != nil {
				return usageError{err}
			}
			if _, err := poppy.NewAgent(id, &poppy.AgentOptions{Store: store, UnsafeAllowLoopbackHTTP: a.allowLoopback}); err != nil {
				if strings.HasPrefix(cfg.BaseURL, "http://") && !a.allowLoopback {
					return &hintError{err: err, code: exitUsage,
						hint: "the protocol requires HTTPS; for an identity on this machine under development, add --unsafe-allow-loopback-http"}
				}
				return usageError{err}
			}
			if err := writeIdentityConfig(ctx, store, cfg); err != nil {
				return err
			}
			kids := make([]string, len(keys))
			for i, k := range keys {
				kids[i] = k.KeyID()
			}
			a.out.emit(map[string]any{"client_id": id.ClientID(), "jwks_uri": id.JWKSURI(), "redirect_uri": cfg.redirectURI(),
				"client_name": cfg.Name, "logo_uri": cfg.LogoURI, "signing_key": kids[0], "published_keys": kids, "rotated": rotate})
			a.out.printf("%s\n", a.out.green("Agent identity ready."))
			a.out.kv("client_id", id.ClientID(), "jwks_uri", id.JWKSURI(), "redirect_uri", cfg.redirectURI(), "signing key", kids[0])
			if len(kids) > 1 {
				a.out.kv("also published", kids[1])
			}
			a.out.printf("\nServe them at that URL: %s\n", a.cmdline("serve-identity"))
			return nil
		},
	}
	cmd.Flags().StringVar(&baseURL, "base-url", "", "the HTTPS URL under which agent.json, jwks.json and callback are served")
	cmd.Flags().StringVar(&name, "name", "", "the client_name Companies show on consent pages")
	cmd.Flags().StringVar(&logo, "logo-uri", "", "the logo_uri Companies show on consent pages")
	cmd.Flags().BoolVar(&rotate, "rotate-keys", false, "make a new signing key; the previous one stays published")
	return cmd
}

func newIdentityCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "identity",
		Short:   "Print the client metadata document and the JWKS",
		GroupID: "agent",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := a.loadAgent(cmd.Context())
			if err != nil {
				return err
			}
			id := agent.Identity()
			a.out.emit(map[string]any{"client_id": id.ClientID(), "metadata": json.RawMessage(id.Metadata()), "jwks": json.RawMessage(id.JWKS())})
			a.out.printf("%s %s\n", a.out.bold("Client metadata at"), id.ClientID())
			a.out.printf("%s\n\n%s %s\n%s\n", indentJSON(id.Metadata()), a.out.bold("JWKS at"), id.JWKSURI(), indentJSON(id.JWKS()))
			return nil
		},
	}
}

func indentJSON(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

func newServeIdentityCmd(a *app) *cobra.Command {
	var addr, certFile, keyFile string
	var reload time.Duration
	cmd := &cobra.Command{
		Use:     "serve-identity",
		Short:   "Serve agent.json, jwks.json and the Direct Sign-In callback",
		GroupID: "agent",
		Long: `serve-identity serves the agent's client metadata, its JWKS and the Direct
Sign-In callback on --addr: plain HTTP for a TLS reverse proxy in front of
it, or HTTPS with --tls-cert and --tls-key. A callback it receives completes
the "poppy signin" waiting for it, in any process sharing the keystore.
Keys rotated with "poppy init --rotate-keys" are picked up within 10 s.
With --json it prints JSON Lines: {"event":"listening",...} and one
{"event":"callback","status":N} per sign-in callback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if (certFile == "") != (keyFile == "") {
				return usageError{errors.New("--tls-cert and --tls-key go together")}
			}
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
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
			a.out.emit(map[string]any{"event": "listening", "addr": ln.Addr().String(), "client_id": id.ClientID(),
				"jwks_uri": id.JWKSURI(), "redirect_uri": a.cfg.redirectURI(), "tls": certFile != ""})
			a.out.printf("Serving %s, %s and %s\non %s. Stop with Ctrl-C.\n", id.ClientID(), id.JWKSURI(), a.cfg.redirectURI(), ln.Addr())
			ctx, cancel := context.WithCancel(ctx)
			reloaded := make(chan struct{})
			go func() { reloadKeys(ctx, a, id, reload); close(reloaded) }()
			defer func() { cancel(); <-reloaded }() // before the keystore closes
			errc := make(chan error, 1)
			go func() {
				if certFile != "" {
					errc <- srv.ServeTLS(ln, certFile, keyFile)
				} else {
					errc <- srv.Serve(ln)
				}
			}()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
				<-errc
				return nil
			}
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8421", "the address to listen on")
	cmd.Flags().StringVar(&certFile, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	cmd.Flags().StringVar(&keyFile, "tls-key", "", "the certificate's private key (PEM)")
	cmd.Flags().DurationVar(&reload, "reload-keys", 10*time.Second, "how often to pick up rotated keys from the keystore")
	_ = cmd.Flags().MarkHidden("reload-keys")
	return cmd
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
