package poppy

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/poppyproto/poppy/internal/netguard"
)

// GuardOptions builds the SDK's default client for a test: a resolver, the
// roots to trust, the guard's relaxations, the environment's proxy and the
// response header timeout (0: the default).
type GuardOptions struct {
	Resolver      *net.Resolver
	Roots         *x509.CertPool
	AllowLoopback bool
	Allow         []netip.Prefix
	Proxy         func(*http.Request) (*url.URL, error)
	HeaderTimeout time.Duration
}

// GuardedClient returns the client newDefaultClient builds with o.
func GuardedClient(o GuardOptions) *http.Client {
	g := &netguard.Guard{AllowLoopback: o.AllowLoopback, Allow: o.Allow, Resolver: o.Resolver, Roots: o.Roots, ProxyFunc: o.Proxy}
	c := newDefaultClient(g)
	if o.HeaderTimeout > 0 {
		c.Transport.(*headerTimeoutTransport).d = o.HeaderTimeout
	}
	return c
}

// IsPublicAddr is the guard's rule for an address (netguard.IsPublic).
var IsPublicAddr = netguard.IsPublic

// DefaultTransportLimits reports the default client's header cap, idle
// timeout and header timeout.
func DefaultTransportLimits() (headerBytes int64, idle, headerTimeout time.Duration) {
	ht := DefaultHTTPClient().Transport.(*headerTimeoutTransport)
	t := ht.base.(*http.Transport)
	return t.MaxResponseHeaderBytes, t.IdleConnTimeout, ht.d
}

// PostClientAuthenticated is Company.postClientAuthenticated, the
// client-authenticated form POST of the device authorization and
// revocation requests, which only this package may send.
func PostClientAuthenticated(ctx context.Context, c *Company, endpoint string, form url.Values) ([]byte, error) {
	return c.postClientAuthenticated(ctx, endpoint, form)
}

// DirectHTTPClient is Session.directHTTPClient, the Session's client that
// never follows a redirect (Mediated Sign-In's credentials).
func DirectHTTPClient(s *Session) *http.Client { return s.directHTTPClient() }
