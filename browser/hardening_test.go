package browser_test

// Attacks on package browser by a hostile Company or a careless caller,
// kept together so that the next attack finds its neighbours.
// Each failed on the code before its fix (cd6a6e5); its comment says how.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/poppytest"
)

// PA-5-07: CheckReturnTo accepted port 99999, which
// no browser can open, and the rest of its host parser let through what
// a browser or the Company reads another way: port 0 and ports past
// 65535, ports with leading zeros (":00443" is 443 to a browser), empty
// labels (".example.test" passed as a subdomain of example.test), labels
// with a leading or trailing hyphen or longer than 63 bytes. Nothing is
// signed for such a return_to. On cd6a6e5: "CheckReturnTo(https://
// example.test:99999/) = <nil>, want ErrReturnTo" and 7 more.
func TestAttackReturnToHost(t *testing.T) {
	env, sess := webEnv(t, nil)
	c := sess.Company()
	for _, u := range []string{
		"https://example.test:99999/", "https://example.test:65536/", "https://example.test:0/", "https://example.test:00443/",
		"https://example.test:0443/", "https://.example.test/", "https://a..example.test/", "https://shop..example.test/",
		"https://-shop.example.test/", "https://shop-.example.test/", "https://" + strings.Repeat("a", 64) + ".example.test/",
		"https://example.test:/", "https://example.test..", "https://shop.example.test:99999/orders",
	} {
		if err := c.CheckReturnTo(u); !errors.Is(err, poppy.ErrReturnTo) {
			t.Errorf("CheckReturnTo(%q) = %v, want ErrReturnTo", u, err)
		}
		if a, err := sess.SignBrowserAssertion(u); a != nil || !errors.Is(err, poppy.ErrReturnTo) {
			t.Errorf("SignAssertion(%q) = %v, %v: signed", u, a, err)
		}
	}
	for _, u := range []string{
		"https://example.test:443/", "https://example.test:1/", "https://shop.example.test:65535/x", "https://example.test./",
		"https://xn--bcher-kva.example.test/", "https://a-b.example.test/", "https://" + strings.Repeat("a", 63) + ".example.test/",
	} {
		if err := c.CheckReturnTo(u); err != nil {
			t.Errorf("CheckReturnTo(%q) = %v, want accepted", u, err)
		}
	}
	// Join signs nothing and opens nothing for such a return_to.
	fb := newFormBrowser(t, env.Srv)
	b, err := browser.New(fb, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join(context.Background(), "https://example.test:99999/"); !errors.Is(err, poppy.ErrReturnTo) {
		t.Fatalf("Join(port 99999) = %v", err)
	}
	if fb.navigations() != 0 || len(env.Srv.RequestsTo(poppytest.EndpointBrowserSession)) != 0 {
		t.Fatal("a refused return_to reached the browser or the Company")
	}
}
