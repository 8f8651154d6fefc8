package main

import (
	"context"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/browser/headless"
	"github.com/poppyproto/poppy/poppytest"
)

// browse joins a headless Chromium to the Session (spec 5) and reads the
// Company's page there, when Chromium is installed.
func browse(ctx context.Context, step func(string, ...any), company *poppytest.Server, sess *poppy.Session) error {
	if _, err := headless.LookPath(); err != nil {
		step("browser: no Chromium found; install the Debian package chromium to see a browser join the Session")
		return nil
	}
	// The fake serves its hosts on a loopback port with its own
	// certificate: map the names there and pin that certificate's key.
	trust := company.BrowserTrust()
	chromium, err := headless.Start(ctx, &headless.Options{
		HostResolverRules: trust.ChromiumHostRules(),
		TrustSPKI:         []string{trust.SPKI},
	})
	if err != nil {
		return err
	}
	defer chromium.Close()

	b, err := browser.New(chromium, sess, nil)
	if err != nil {
		return err
	}
	res, err := b.Join(ctx, "https://example.test/account")
	if err != nil {
		return err // errors.Is(err, browser.ErrBrowserJoinFailed) when the Company refused
	}
	step("browser: headless Chromium %s Session %s and landed on %s → %d", res.Mode, res.SessionID, res.URL, res.Status)
	text, err := chromium.Text(ctx)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "Signed") || strings.HasPrefix(line, "Scopes") {
			step("  the page says: %s", line)
		}
	}
	return nil
}
