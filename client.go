package poppy

// The SDK's own HTTP client (DefaultHTTPClient, and what NewAgent uses when
// AgentOptions.HTTPClient is nil).
//
// A Company's documents name the hosts the SDK then calls with tokens and
// assertions: poppy.json, the OAuth metadata and redirects. A hostile
// Company could name 169.254.169.254 or an internal host and have an
// agent product's server send authenticated requests into its own network
// (server-side request forgery). So the default client connects only to
// public addresses. The check runs in the dialer's Control hook on the
// address actually being connected to, after DNS resolution, so a name
// that resolves to a private address (DNS rebinding included) is refused
// as well: refused are loopback, private (RFC 1918, fc00::/7), link-local
// (169.254/16 with the cloud metadata addresses, fe80::/10), CGNAT
// (100.64/10), unspecified, multicast, benchmarking, reserved and
// NAT64-embedded forms of these. AgentOptions.UnsafeAllowLoopbackHTTP allows
// loopback; AgentOptions.AllowNetworks allows the networks it lists. A
// caller-supplied *http.Client keeps its own policy: the SDK does not
// change how it dials.
//
// Proxies. The default client uses the proxy the environment names
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY). The operator chose that proxy, not
// the Company, so connecting to it is allowed wherever it is, loopback
// included. Through a proxy the proxy resolves names and connects, so the
// SDK checks what it can: a URL whose host is a literal address (or
// localhost) that the guard refuses is not sent to the proxy, and a direct
// request to the proxy's own address is refused (it would reach the proxy
// without the guard). An operator who needs the guard for names behind a
// proxy configures it in the proxy.
//
// Bounds. Response headers are capped at maxResponseHeaderBytes (a
// WWW-Authenticate of megabytes is refused before it is parsed), and a
// response must begin within defaultResponseHeaderTimeout, so that the
// simplest call, sess.HTTPClient().Get(url), can't hang on a silent server.
// net/http has no per-request header timeout, so the client's transport is
// wrapped: the wrapper cancels the request if no response has arrived in
// time, and WithResponseHeaderTimeout changes or lifts the wait for the
// requests of one ctx (long polls and event streams). Idle connections are
// closed after 4 s, before the 5 s keep-alive timeout common servers
// (Node, Apache) use, so that a pooled connection is rarely reused just as
// the server closes it.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// defaultResponseHeaderTimeout is how long the default client waits
	// for a response to begin.
	defaultResponseHeaderTimeout = 30 * time.Second
	// maxResponseHeaderBytes caps the response headers the default client
	// reads.
	maxResponseHeaderBytes = 64 << 10
	// defaultIdleConnTimeout is shorter than the 5 s keep-alive timeout of
	// Node and Apache.
	defaultIdleConnTimeout = 4 * time.Second
)

// ErrForbiddenAddress is returned when the SDK's default client refuses to
// connect to an address that is not public (loopback, private, link-local,
// ...): a Company's documents may name any host, and the SDK must not be
// aimed into the network it runs in. See AgentOptions.AllowNetworks.
var ErrForbiddenAddress = errors.New("poppy: refusing to connect to a non-public address")

// ErrResponseHeaderTimeout is returned when the default client got no
// response headers in time. See WithResponseHeaderTimeout.
var ErrResponseHeaderTimeout = errors.New("poppy: no response headers in time")

// DefaultHTTPClient returns the client the SDK uses when none is given:
// connections are reused (idle ones for 4 s), dialing and TLS handshakes
// time out, a response must begin within 30 s and its headers may not
// exceed 64 KiB, and it connects only to public addresses (not loopback,
// private, link-local or other special-purpose ones; checked on the
// resolved address, so DNS rebinding can't bypass it). It has no overall
// timeout, because conversation streams and long polls stay open: every
// call is bounded by its ctx, token and discovery requests by 30 s more.
//
// A streaming or long-polling request opts out of the 30 s header wait
// with a ctx from WithResponseHeaderTimeout(ctx, 0), or sets its own wait.
// NewAgent with a nil AgentOptions.HTTPClient builds the same client, with
// the address guard relaxed by UnsafeAllowLoopbackHTTP and AllowNetworks.
func DefaultHTTPClient() *http.Client {
	return newDefaultClient(&dialGuard{})
}

type headerTimeoutKey struct{}

// WithResponseHeaderTimeout returns a ctx whose requests, sent through the
// SDK's default client, wait d for the response headers instead of 30 s.
// d == 0 means no header timeout for requests made with that ctx, as a
// long poll or an event stream (SSE) needs; ctx still bounds them. A
// caller-supplied AgentOptions.HTTPClient is not affected: it keeps its own
// timeouts.
func WithResponseHeaderTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, headerTimeoutKey{}, d)
}

// newDefaultClient builds DefaultHTTPClient's client with guard g.
func newDefaultClient(g *dialGuard) *http.Client {
	g.init()
	guarded := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, ControlContext: g.control, Resolver: g.resolver}
	plain := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy: g.proxy,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if g.isProxy(addr) {
				return plain.DialContext(ctx, network, addr) // the operator's proxy
			}
			return guarded.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: g.roots},
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        defaultIdleConnTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return &http.Client{Transport: &headerTimeoutTransport{base: t, d: defaultResponseHeaderTimeout}}
}

// dialGuard decides which addresses the default client may connect to.
type dialGuard struct {
	allowLoopback bool
	allow         []netip.Prefix

	// For tests: a resolver and trusted roots. Nil means the system's.
	resolver *net.Resolver
	roots    *x509.CertPool
	// proxyFunc is the environment's proxy; nil means
	// http.ProxyFromEnvironment.
	proxyFunc func(*http.Request) (*url.URL, error)

	once    sync.Once
	proxies map[string]bool // host:port of the operator's proxies
}

func (g *dialGuard) init() {
	g.once.Do(func() {
		if g.proxyFunc == nil {
			g.proxyFunc = http.ProxyFromEnvironment
		}
		g.proxies = map[string]bool{}
		// The environment's proxies are the same for every host (only
		// NO_PROXY varies), so two probes name them all.
		for _, probe := range []string{"https://proxy-probe.poppy.invalid/", "http://proxy-probe.poppy.invalid/"} {
			req, _ := http.NewRequest(http.MethodGet, probe, nil)
			if u, err := g.proxyFunc(req); err == nil && u != nil {
				g.proxies[canonicalAddr(u)] = true
			}
		}
	})
}

func (g *dialGuard) isProxy(addr string) bool { return g.proxies[addr] }

// proxy is the transport's Proxy: the environment's proxy, with the checks
// the guard can make for a request the proxy will connect.
func (g *dialGuard) proxy(req *http.Request) (*url.URL, error) {
	u, err := g.proxyFunc(req)
	if err != nil {
		return nil, err
	}
	if u == nil {
		if g.proxies[canonicalAddr(req.URL)] {
			return nil, fmt.Errorf("%w: %s is the proxy's address", ErrForbiddenAddress, req.URL.Host)
		}
		return nil, nil
	}
	host := req.URL.Hostname()
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") && !g.allowLoopback {
		return nil, fmt.Errorf("%w: %s", ErrForbiddenAddress, host)
	}
	if ip, err := netip.ParseAddr(host); err == nil && !g.allowed(ip) {
		return nil, fmt.Errorf("%w: %s", ErrForbiddenAddress, ip)
	}
	return u, nil
}

// control is the dialer's Control hook: address is the resolved IP:port
// about to be connected to.
func (g *dialGuard) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
	}
	if !g.allowed(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, ap.Addr())
	}
	return nil
}

// allowed reports whether the default client may connect to ip.
func (g *dialGuard) allowed(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range g.allow {
		if p.Contains(ip) {
			return true
		}
	}
	if ip.IsLoopback() {
		return g.allowLoopback
	}
	return isPublicAddr(ip)
}

// specialPrefixes are the special-purpose ranges (RFC 6890 and successors)
// that netip's predicates don't name.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT, RFC 6598
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// isPublicAddr reports whether ip is a public unicast address.
func isPublicAddr(ip netip.Addr) bool {
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range specialPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	if nat64.Contains(ip) {
		b := ip.As16()
		return isPublicAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	return true
}

// canonicalAddr is host:port of u, with the scheme's default port, as
// net/http dials it.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// headerTimeoutTransport bounds how long a request waits for its response
// headers, per request (WithResponseHeaderTimeout), which http.Transport
// can only do for all requests.
type headerTimeoutTransport struct {
	base http.RoundTripper
	d    time.Duration
}

func (t *headerTimeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.d
	if v, ok := req.Context().Value(headerTimeoutKey{}).(time.Duration); ok {
		d = v
	}
	if d <= 0 {
		return t.base.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(d, func() { cancel(ErrResponseHeaderTimeout) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	fired := !timer.Stop()
	if err == nil && fired {
		// The headers came as the timer fired: the body's ctx is gone.
		resp.Body.Close()
		err = ErrResponseHeaderTimeout
	}
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrResponseHeaderTimeout) && req.Context().Err() == nil {
			err = fmt.Errorf("%w (%v)", ErrResponseHeaderTimeout, d)
		}
		cancel(nil)
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, nil // the body is the connection; ctx lives with it
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// CloseIdleConnections closes the base transport's idle connections.
func (t *headerTimeoutTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// cancelOnClose releases a request's ctx when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}
