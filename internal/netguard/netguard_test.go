package netguard

import (
	"errors"
	"net/netip"
	"testing"
)

// TestCheckHost: the rule a URL's host is judged by before any name is
// resolved (through a proxy, and by poppycheck for a Company's documents)
// refuses every spelling of a non-public address and the names of this
// machine, and lets a DNS name through; AllowLoopback and Allow relax it.
func TestCheckHost(t *testing.T) {
	refused := []string{"169.254.169.254", "10.0.0.7", "::ffff:127.0.0.1", "127.0.0.1", "0x7f.1", "2852039166", "localhost", "app.localhost", "[::1]", "1.2.3.999"}
	for _, h := range refused {
		err := (&Guard{}).CheckHost(h)
		var r *Refused
		if !errors.As(err, &r) || !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: %v, want a *Refused wrapping ErrForbidden", h, err)
		}
	}
	for _, h := range []string{"example.com", "auth.example.test", "8.8.8.8", "2001:4860:4860::8888"} {
		if err := (&Guard{}).CheckHost(h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	loop := &Guard{AllowLoopback: true}
	for _, h := range []string{"127.0.0.1", "::ffff:127.0.0.1", "localhost", "::1"} {
		if err := loop.CheckHost(h); err != nil {
			t.Errorf("AllowLoopback, %s: %v", h, err)
		}
	}
	if err := loop.CheckHost("10.0.0.7"); err == nil {
		t.Error("AllowLoopback let 10.0.0.7 through")
	}
	var r *Refused
	if err := (&Guard{}).CheckHost("::ffff:127.0.0.1"); !errors.As(err, &r) || !r.Loopback {
		t.Errorf("::ffff:127.0.0.1: %+v, want Loopback", r)
	}
	priv := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	if err := priv.CheckHost("10.0.0.7"); err != nil {
		t.Errorf("Allow 10.0.0.0/8, 10.0.0.7: %v", err)
	}
}
