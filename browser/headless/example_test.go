package headless_test

import (
	"context"
	"fmt"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/browser/headless"
)

// Join a headless Chromium to a Session, land on return_to and read the
// page. (Compiled, not run: it needs Chromium and a Company; the tests of
// this package run the same against poppytest.)
func Example() {
	ctx := context.Background()
	var sess *poppy.Session // from company.Session(ctx, user, nil)

	chromium, err := headless.Start(ctx, nil)
	if err != nil {
		log.Fatal(err) // headless.ErrNoChromium: install the Debian package chromium
	}
	defer chromium.Close()
	b, err := browser.New(chromium, sess, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := b.Join(ctx, "https://example.com/orders")
	if err != nil {
		log.Fatal(err) // browser.ErrBrowserJoinFailed when the Company refused
	}
	fmt.Println(res.Mode, res.URL)

	text, _ := chromium.Text(ctx)
	png, _ := chromium.Screenshot(ctx)
	fmt.Println(len(text), len(png))
}
