package main

// poppy status and poppy signout: what the keystore holds, and signing out
// (spec 4.9).

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

type statusJSON struct {
	ClientID  string              `json:"client_id,omitempty"`
	Companies []statusCompanyJSON `json:"companies"`
}

type statusCompanyJSON struct {
	Domain  string           `json:"domain"`
	Name    string           `json:"name"`
	Issuer  string           `json:"issuer"`
	Profile string           `json:"profile"`
	UserID  string           `json:"user_id,omitempty"`
	Session []statusSessJSON `json:"sessions"`
	Tokens  []statusTokJSON  `json:"account_tokens"`
}

type statusSessJSON struct {
	Name      string     `json:"name"`
	SessionID string     `json:"session_id"`
	SignedIn  bool       `json:"signed_in"`
	Account   string     `json:"account,omitempty"`
	Scopes    []string   `json:"scopes"`
	Expires   *time.Time `json:"token_expires_at,omitempty"`
}

type statusTokJSON struct {
	Account string     `json:"account"`
	Scopes  []string   `json:"scopes"`
	Expires *time.Time `json:"expires_at,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Second)
	return &u
}

type statusOptions struct {
	app    *app
	Domain string // "" for every Company
	All    bool
}

func newCmdStatus(a *app, runF func(context.Context, *statusOptions) error) *cobra.Command {
	opts := &statusOptions{app: a}
	cmd := &cobra.Command{
		Use:   "status [DOMAIN]",
		Short: "List the Companies, Users, Sessions and Account Tokens in the keystore",
		Long: `status lists, without contacting any Company, every Company the keystore
has been used with, and for each profile (local User) its User ID there, its
Sessions (signed in or not, scopes, token expiry) and its Account Tokens
(scopes, expiry). Never a token. --all lists every profile, not only --profile.`,
		Example: `  poppy status
  poppy status example.com
  poppy --json status --all`,
		GroupID:           "company",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = ""
			if len(args) == 1 {
				opts.Domain = args[0]
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runStatus(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "list every profile")
	return cmd
}

func runStatus(ctx context.Context, opts *statusOptions) error {
	a := opts.app
	agent, err := a.loadAgent(ctx)
	if err != nil {
		return err
	}
	recs, err := knownCompanies(ctx, a.store)
	if err != nil {
		return err
	}
	out := statusJSON{ClientID: agent.Identity().ClientID(), Companies: []statusCompanyJSON{}}
	for _, r := range recs {
		if opts.Domain != "" && r.Domain != opts.Domain {
			continue
		}
		if !opts.All && r.Profile != a.profile {
			continue
		}
		cj := statusCompanyJSON{Domain: r.Domain, Name: r.Name, Issuer: r.Issuer, Profile: r.Profile,
			Session: []statusSessJSON{}, Tokens: []statusTokJSON{}}
		if b, err := a.store.Get(ctx, keystore.Key{Kind: keystore.KindUserID, User: r.Profile, Issuer: r.Issuer}); err == nil {
			cj.UserID = string(b)
		}
		ss, err := agent.StoredSessions(ctx, r.Profile, r.Issuer)
		if err != nil {
			return err
		}
		for _, s := range ss {
			cj.Session = append(cj.Session, statusSessJSON{Name: s.Name, SessionID: s.ID, SignedIn: s.SignedIn,
				Account: s.Account, Scopes: nonNil(s.Scopes), Expires: timePtr(s.Expiry)})
		}
		ts, err := agent.StoredAccountTokens(ctx, r.Profile, r.Issuer)
		if err != nil {
			return err
		}
		for _, t := range ts {
			cj.Tokens = append(cj.Tokens, statusTokJSON{Account: t.Account, Scopes: nonNil(t.Scopes), Expires: timePtr(t.Expiry)})
		}
		out.Companies = append(out.Companies, cj)
	}
	a.out.emit(out)
	o := a.out
	o.printf("%s %s\n", o.bold("Agent"), out.ClientID)
	if len(out.Companies) == 0 {
		o.printf("No Company yet. Try: %s\n", a.cmdline("discover", "example.com"))
	}
	for _, c := range out.Companies {
		o.printf("\n%s %s  %s\n", o.bold(esc(c.Name)), o.dim("("+esc(c.Domain)+")"), o.dim("profile "+esc(c.Profile)+", user_id "+c.UserID))
		for _, s := range c.Session {
			state := "signed out"
			if s.SignedIn {
				state = o.green("signed in") + " (account " + esc(s.Account) + ", " + orNone(escJoin(s.Scopes)) + ")"
			}
			exp := ""
			if s.Expires != nil {
				exp = ", token until " + s.Expires.Local().Format(time.RFC3339)
			}
			o.printf("  session %s %s: %s%s\n", esc(s.Name), esc(s.SessionID), state, exp)
		}
		for _, t := range c.Tokens {
			exp := "no expiry"
			if t.Expires != nil {
				exp = "until " + t.Expires.Local().Format(time.RFC3339)
			}
			o.printf("  account token %s: %s, %s\n", esc(t.Account), orNone(escJoin(t.Scopes)), exp)
		}
	}
	return nil
}

type signOutOptions struct {
	app     *app
	Domain  string
	Account string
}

func newCmdSignOut(a *app, runF func(context.Context, *signOutOptions) error) *cobra.Command {
	opts := &signOutOptions{app: a}
	cmd := &cobra.Command{
		Use:   "signout DOMAIN",
		Short: "Sign out: revoke and delete the Account Token, sign the Sessions out",
		Long: `signout revokes the Account Token for --account at the Company, deletes it
from the keystore even if the revocation fails, and signs out the Sessions
that used it.`,
		Example: `  poppy signout example.com
  poppy signout example.com --account work`,
		GroupID:           "company",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSignOut(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Account, "account", "", `the account label (default "default")`)
	return cmd
}

func runSignOut(ctx context.Context, opts *signOutOptions) error {
	a := opts.app
	c, err := a.company(ctx, opts.Domain)
	if err != nil {
		return err
	}
	s, err := c.Session(ctx, a.profile, nil)
	if err != nil {
		return err
	}
	account := opts.Account
	err = s.SignOut(ctx, account)
	revoked := err == nil
	switch {
	case errors.Is(err, poppy.ErrNoAccountToken):
		a.out.emit(map[string]any{"domain": c.Domain(), "account": orDefault(account), "signed_out": true, "revoked": false, "had_token": false})
		a.out.printf("You were not signed in to %s (account %s).\n", esc(c.Name()), esc(orDefault(account)))
		return nil
	case errors.Is(err, poppy.ErrRevocationFailed):
		a.out.warn("poppy: the Company did not confirm the revocation; the Account Token is deleted here all the same")
	case err != nil:
		return err
	}
	a.out.emit(map[string]any{"domain": c.Domain(), "account": orDefault(account), "signed_out": true, "revoked": revoked, "had_token": true})
	a.out.printf("%s of %s (account %s).\n", a.out.green("Signed out"), esc(c.Name()), esc(orDefault(account)))
	return nil
}

func orDefault(account string) string {
	if account == "" {
		return poppy.DefaultAccount
	}
	return account
}
