package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/browser/headless"
	"github.com/poppyproto/poppy/internal/realtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// With Chromium, a browser joins the Session and sees it signed in
// (spec 5); without, the example says what to install.
func TestBrowser(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("browser: %v\n%s", err, out.String())
	}
	browserLines := []string{"browser: headless Chromium joined Session ses_", "landed on https://example.test/account → 200",
		"the page says: Signed in to account acct_1.", "the page says: Scopes: poppy:read"}
	realtest.WatchPATH() // a run without Chromium is not served from the cache once it is installed
	if _, err := headless.LookPath(); err != nil {
		if os.Getenv("POPPY_TEST_REAL") == "1" {
			t.Errorf("POPPY_TEST_REAL=1 but %v", err)
		}
		browserLines = []string{"browser: no Chromium found; install the Debian package chromium"}
	}
	for _, want := range browserLines {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
