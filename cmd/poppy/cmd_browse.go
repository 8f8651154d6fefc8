package main

// poppy browse: a headless Chromium that this command starts and drives
// joins the Session (spec 5) and opens a page; the command prints its text
// or saves a screenshot. The browser assertion goes only to that Chromium,
// through package browser's one-shot loopback page: never to the User's
// own browser ($BROWSER is not used), whose cookie would hold the agent's
// Session out of its reach (PA-5-11).

import (
	"context"
	"errors"
	"github.com/poppyproto/poppy"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/browser/headless"
)

type browseOptions struct {
	app        *app
	Domain     string
	URL        string
	Screenshot string
	Text       bool
	Chromium   string
	HostRules  string
	TrustSPKI  []string
}

func newCmdBrowse(a *app, runF func(context.Context, *browseOptions) error) *cobra.Command {
	opts := &browseOptions{app: a}
	cmd := &cobra.Command{
		Use:   "browse DOMAIN URL",
		Short: "Open a page of the Company's website in a headless Chromium joined to your Session",
		Long: `browse starts a headless Chromium of its own (Debian's chromium package, or
--chromium PATH), joins it to your Session at the Company, so that the website
sees the same Session and sign-in as the APIs, and opens URL. It prints the
page's text (--text, the default) or saves a PNG screenshot (--screenshot FILE).
The Chromium and its profile are removed when the command ends; your own
browser is never given the Session.`,
		Example: `  poppy browse example.com https://example.com/account/orders
  poppy browse example.com https://example.com/ --screenshot home.png
  poppy --json browse example.com https://example.com/account --text`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain, opts.URL = args[0], args[1]
			if !strings.HasPrefix(opts.URL, "https://") {
				return usageError{err: errors.New("poppy: URL must be an https:// URL on the Company's website")}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runBrowse(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Screenshot, "screenshot", "", "save a PNG screenshot of the page to FILE")
	f.BoolVar(&opts.Text, "text", false, "print the page's text (the default without --screenshot)")
	f.StringVar(&opts.Chromium, "chromium", "", "the Chromium executable (default: chromium on PATH)")
	f.StringVar(&opts.HostRules, "unsafe-chromium-host-rules", "", "Chromium's --host-resolver-rules, for a Company under test")
	f.StringArrayVar(&opts.TrustSPKI, "unsafe-chromium-trust-spki", nil, "accept the server certificate with this SPKI hash, for a Company under test")
	_ = f.MarkHidden("unsafe-chromium-host-rules")
	_ = f.MarkHidden("unsafe-chromium-trust-spki")
	return cmd
}

func runBrowse(ctx context.Context, opts *browseOptions) error {
	a := opts.app
	domain, target, shot := opts.Domain, opts.URL, opts.Screenshot
	if opts.HostRules != "" || len(opts.TrustSPKI) > 0 {
		a.out.warn("WARNING: --unsafe-chromium-host-rules / --unsafe-chromium-trust-spki change where Chromium connects and which certificate it accepts: for a Company under test only.")
	}
	c, s, err := a.session(ctx, domain)
	if err != nil {
		return err
	}
	chromium, err := headless.Start(ctx, &headless.Options{ExecPath: opts.Chromium, HostResolverRules: opts.HostRules, TrustSPKI: opts.TrustSPKI, Logger: a.log})
	if errors.Is(err, headless.ErrNoChromium) {
		return &hintError{err: err, code: exitError, hint: "install Chromium (Debian: apt-get install chromium), or name it with --chromium PATH"}
	}
	if err != nil {
		return err
	}
	defer chromium.Close()
	b, err := browser.New(chromium, s, &browser.Options{Logger: a.log})
	if err != nil {
		return err
	}
	res, err := b.Join(ctx, target)
	if errors.Is(err, poppy.ErrReturnTo) {
		// A page off the website: join on its home page, then go.
		res, err = b.Join(ctx, "")
	}
	if err != nil {
		return err
	}
	nav := &res.Navigation
	if nav.URL != target && res.URL == "https://"+c.Domain()+"/" {
		if nav, err = b.Browse(ctx, target); err != nil {
			return err
		}
	}
	mode := "joined"
	if res.Mode != browser.Joined {
		mode = "visitor"
	}
	j := map[string]any{"domain": c.Domain(), "url": nav.URL, "status": nav.Status, "mode": mode, "session_id": res.SessionID}
	if shot != "" {
		png, err := chromium.Screenshot(ctx)
		if err != nil {
			return err
		}
		if err := os.WriteFile(shot, png, 0o600); err != nil {
			return err
		}
		j["screenshot"], j["screenshot_bytes"] = shot, len(png)
	}
	var page string
	if opts.Text || shot == "" {
		if page, err = chromium.Text(ctx); err != nil {
			return err
		}
		j["text"] = page
	}
	a.out.emit(j)
	o := a.out
	how := "joined to Session " + esc(res.SessionID)
	if mode == "visitor" {
		how = "as a visitor (the Company offers no browser session)"
	}
	o.printf("%s %s (%d), %s\n", o.bold("Opened"), esc(nav.URL), nav.Status, how)
	if shot != "" {
		o.printf("Screenshot saved to %s (%d bytes)\n", shot, j["screenshot_bytes"])
	}
	if page != "" {
		o.printf("\n%s", escLines(page, ""))
	}
	return nil
}
