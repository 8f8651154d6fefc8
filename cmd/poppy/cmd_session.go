package main

// poppy session: start or resume a Session (spec 4.2) and show it, never
// its token.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

type sessionJSON struct {
	Domain    string    `json:"domain"`
	Issuer    string    `json:"issuer"`
	Profile   string    `json:"profile"`
	Name      string    `json:"name"`
	SessionID string    `json:"session_id"`
	UserID    string    `json:"user_id"`
	SignedIn  bool      `json:"signed_in"`
	Scopes    []string  `json:"scopes"`
	TokenType string    `json:"token_type"`
	Expires   time.Time `json:"expires_at"`
	Resource  string    `json:"resource,omitempty"`
	New       bool      `json:"new"`
}

type sessionOptions struct {
	app      *app
	Domain   string
	New      bool
	Scopes   []string
	Resource string
	Name     string
}

func newCmdSession(a *app, runF func(context.Context, *sessionOptions) error) *cobra.Command {
	opts := &sessionOptions{app: a}
	cmd := &cobra.Command{
		Use:   "session DOMAIN",
		Short: "Start or resume the Session at a Company and show it (never its token)",
		Long: `session starts a Session at the Company, or resumes the one in the keystore,
and shows its ID, your User ID there, whether it is signed in, its scopes
and when its token expires. --scope and --resource get a narrower token
(fewer scopes, or one service) and show that one. --new starts a new Session
in place of the stored one.`,
		Example: `  poppy session example.com
  poppy session example.com --scope poppy:read
  poppy session example.com --resource https://mcp.example.com/mcp
  poppy --json session example.com --new`,
		GroupID:           "company",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSession(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.New, "new", false, "start a new Session instead of resuming the stored one")
	cmd.Flags().StringArrayVar(&opts.Scopes, "scope", nil, "get a token for fewer scopes (repeatable)")
	cmd.Flags().StringVar(&opts.Resource, "resource", "", "get a token for one service (RFC 8707 resource)")
	cmd.Flags().StringVar(&opts.Name, "name", "", `the Session's name, for several Sessions at one Company (default "default")`)
	return cmd
}

func runSession(ctx context.Context, opts *sessionOptions) error {
	a := opts.app
	c, err := a.company(ctx, opts.Domain)
	if err != nil {
		return err
	}
	if opts.New {
		k := keystore.Key{Kind: keystore.KindSession, User: a.profile, Issuer: c.Issuer(), ID: sessionName(opts.Name)}
		if err := a.store.Update(ctx, k, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
			return err
		}
	}
	s, err := c.Session(ctx, a.profile, &poppy.SessionOptions{Name: opts.Name})
	if err != nil {
		return err
	}
	var topts *poppy.TokenOptions
	if len(opts.Scopes) > 0 || opts.Resource != "" {
		topts = &poppy.TokenOptions{Scopes: opts.Scopes, Resource: opts.Resource}
	}
	tok, err := s.Token(ctx, topts)
	if err != nil {
		if errors.Is(err, poppy.ErrInvalidScope) || errors.Is(err, poppy.ErrInsufficientScope) {
			return a.signInHint(err, c, opts.Domain, opts.Scopes)
		}
		return err
	}
	j := sessionJSON{Domain: c.Domain(), Issuer: c.Issuer(), Profile: a.profile, Name: s.Name(), SessionID: s.ID(),
		UserID: s.UserID(), SignedIn: tok.SignedIn, Scopes: append([]string{}, tok.Scopes...), TokenType: tok.Type,
		Expires: tok.Expiry.UTC().Truncate(time.Second), Resource: tok.Resource, New: opts.New}
	a.out.emit(j)
	o := a.out
	state := "signed out"
	if j.SignedIn {
		state = o.green("signed in")
	}
	o.printf("%s at %s: %s\n", o.bold("Session"), esc(c.Name()), state)
	kv := []string{"session_id", esc(j.SessionID), "user_id", j.UserID, "profile", esc(j.Profile), "name", esc(j.Name),
		"scopes", orNone(escJoin(j.Scopes)), "token", esc(j.TokenType) + ", expires " + j.Expires.Local().Format(time.RFC3339)}
	if j.Resource != "" {
		kv = append(kv, "resource", esc(j.Resource))
	}
	o.kv(kv...)
	if !j.SignedIn {
		o.printf("\nTo act on your account: %s\n", a.cmdline("signin", shellQuote(opts.Domain)))
	}
	return nil
}

func sessionName(n string) string {
	if n == "" {
		return "default"
	}
	return n
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}
