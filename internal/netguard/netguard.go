// Package netguard is the SDK's one rule for which addresses an agent
// connects to, and the transport that enforces it (the root package's
// DefaultHTTPClient, and poppycheck, which judges a Company's documents by
// the same rule).
//
// A Company's documents name the hosts an agent then calls with tokens and
// assertions: poppy.json, the OAuth metadata and redirects. A hostile
// Company could name 169.254.169.254 or an internal host and have an
// agent product's server send authenticated requests into its own network
// (server-side request forgery). So the guarded transport connects only to
// public addresses. The check runs in the dialer's Control hook on the
// address actually being connected to, after DNS resolution, so a name
// that resolves to a private address (DNS rebinding included) is refused
// as well: refused are loopback, private (RFC 1918, fc00::/7), link-local
// (169.254/16 with the cloud metadata addresses, fe80::/10), CGNAT
// (100.64/10), unspecified, multicast, benchmarking, documentation and
// reserved ranges. An IPv6 address that carries an IPv4 address (IPv4-
// mapped, IPv4-compatible, SIIT, NAT64 64:ff9b::/96 and the local-use
// 64:ff9b:1::/48, 6to4, Teredo) is classed by the IPv4 address it carries,
// where the packet ends up. Guard.AllowLoopback allows loopback;
// Guard.Allow allows the networks it lists.
//
// Proxies. The transport uses the proxy the environment names
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY). The operator chose that proxy, not
// the Company, so connecting to it is allowed wherever it is, loopback
// included. Through a proxy the proxy resolves names and connects, so the
// guard checks what it can before the CONNECT (Guard.CheckHost): a URL
// whose host is an address the guard refuses, in any spelling a resolver
// reads as one (the inet_aton forms: "2130706433", "0x7f.1", "127.1",
// "0251.0376.0251.0376", and IPv6 literals), a host that ends in a number
// but is no address, and localhost and every name under it, is not sent to
// the proxy; a direct request to the proxy's own address is refused (it
// would reach the proxy without the guard). A DNS name is sent as it is:
// what it resolves to is the proxy's to check, and an operator who needs
// the guard for names behind a proxy configures it in the proxy.
package netguard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrForbidden is the error every refusal wraps (the root package's
// ErrForbiddenAddress).
var ErrForbidden = errors.New("poppy: refusing to connect to a non-public address")

// Refused is a refusal to connect: what was refused and why. It wraps
// ErrForbidden, and its text is ErrForbidden's followed by Detail.
type Refused struct {
	// Host is the URL's host, when the refusal was made on it before any
	// name was resolved; "" when the refusal was made on the resolved
	// address (Control).
	Host string
	// Addr is the address refused, when there is one.
	Addr netip.Addr
	// Loopback says the address, or the name, is this machine's:
	// AllowLoopback would have allowed it.
	Loopback bool
	// Detail says what was refused.
	Detail string
}

func (e *Refused) Error() string { return ErrForbidden.Error() + ": " + e.Detail }
func (e *Refused) Unwrap() error { return ErrForbidden }

// NewTransport returns a transport that connects only where g allows (the
// environment's proxy aside), with the SDK's bounds: dialing and TLS
// handshakes time out after 10 s, idle connections are closed after
// idleTimeout, response headers are capped at maxHeaderBytes. g's Roots,
// when set, are the trusted certificate authorities.
func NewTransport(g *Guard, idleTimeout time.Duration, maxHeaderBytes int64) *http.Transport {
	g.init()
	guarded := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, ControlContext: g.Control, Resolver: g.Resolver}
	plain := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: g.proxy,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if g.isProxy(addr) {
				return plain.DialContext(ctx, network, addr) // the operator's proxy
			}
			return guarded.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: g.Roots},
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        idleTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
}

// Guard decides which addresses a client may connect to. The zero value
// allows public addresses only. A Guard is used by one transport
// (NewTransport) and must not be copied after first use.
type Guard struct {
	// AllowLoopback lets it connect to loopback addresses
	// (AgentOptions.UnsafeAllowLoopbackHTTP).
	AllowLoopback bool
	// Allow lists networks it may connect to although they are not
	// public (AgentOptions.AllowNetworks).
	Allow []netip.Prefix

	// Resolver resolves names; nil means the system's.
	Resolver *net.Resolver
	// Roots are the trusted certificate authorities; nil means the
	// system's.
	Roots *x509.CertPool
	// ProxyFunc is the environment's proxy; nil means
	// http.ProxyFromEnvironment.
	ProxyFunc func(*http.Request) (*url.URL, error)

	once    sync.Once
	proxies map[string]bool // host:port of the operator's proxies
}

func (g *Guard) init() {
	g.once.Do(func() {
		if g.ProxyFunc == nil {
			g.ProxyFunc = http.ProxyFromEnvironment
		}
		g.proxies = map[string]bool{}
		// The environment's proxies are the same for every host (only
		// NO_PROXY varies), so two probes name them all.
		for _, probe := range []string{"https://proxy-probe.poppy.invalid/", "http://proxy-probe.poppy.invalid/"} {
			req, _ := http.NewRequest(http.MethodGet, probe, nil)
			if u, err := g.ProxyFunc(req); err == nil && u != nil {
				g.proxies[CanonicalAddr(u)] = true
			}
		}
	})
}

func (g *Guard) isProxy(addr string) bool { return g.proxies[addr] }

// proxy is the transport's Proxy: the environment's proxy, with the checks
// the guard can make for a request the proxy will connect.
func (g *Guard) proxy(req *http.Request) (*url.URL, error) {
	u, err := g.ProxyFunc(req)
	if err != nil {
		return nil, err
	}
	if u == nil {
		if g.proxies[CanonicalAddr(req.URL)] {
			return nil, &Refused{Host: req.URL.Host, Detail: req.URL.Host + " is the proxy's address"}
		}
		return nil, nil
	}
	if err := g.CheckHost(req.URL.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// CheckHost refuses, before any name is resolved, a URL host the guard
// would refuse wherever it is connected to: an address in any spelling a
// resolver reads as one (HostAddr) that isn't allowed, a host that ends
// in a number but is no address, and a name for this machine (IsLocalName)
// unless AllowLoopback. Through a proxy it is the only check (the proxy
// resolves and connects); a caller that must judge a URL without
// connecting to it (poppycheck, judging a Company's documents) uses it
// too. A DNS name passes: what it resolves to is checked when connecting.
// The error is a *Refused.
func (g *Guard) CheckHost(host string) error {
	if IsLocalName(host) && !g.AllowLoopback {
		return &Refused{Host: host, Loopback: true, Detail: host + " is a name for this machine"}
	}
	switch ip, numeric := HostAddr(host); {
	case ip.IsValid() && !g.allowed(ip):
		return &Refused{Host: host, Addr: ip, Loopback: ip.Unmap().IsLoopback(), Detail: host + " (" + ip.String() + ")"}
	case !ip.IsValid() && numeric:
		return &Refused{Host: host, Detail: host + " is a number that is not an address"}
	}
	return nil
}

// Through a proxy, the proxy reads the host of a URL, not the guard's
// dialer. A resolver (getaddrinfo, and with it curl, Squid and most
// proxies) reads a numeric host the way inet_aton(3) does: one to four
// parts separated by dots, each decimal, octal with a leading 0, or hex
// with 0x; the last part fills the bytes the others leave. So
// "2130706433", "0x7f.1", "127.1" and "0177.0.0.01" are all 127.0.0.1,
// "169.254.43518" and "0xa9fea9fe" are 169.254.169.254. hostAddr reads
// every such spelling, and an IPv6 literal, into the address the proxy
// would connect to, and the guard classes that address. A host whose last
// label is a number (decimal, or 0x hex) but which is no address in any
// of these forms is refused too (numeric): no DNS name ends in a number
// (the WHATWG URL standard refuses such hosts), and what a proxy does
// with one is its own guess.

// hostAddr returns the address a resolver reads host as, if host is a
// numeric address in any of the inet_aton forms or an IPv6 literal, and
// whether host's last label looks numeric at all.
func HostAddr(host string) (addr netip.Addr, numeric bool) {
	h := strings.TrimSuffix(host, ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip, true
	}
	if strings.Contains(h, ":") {
		return netip.Addr{}, true // an IPv6 literal netip refused
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if !numericLabel(last) {
		return netip.Addr{}, false
	}
	if ip, ok := parseInetAton(h); ok {
		return ip, true
	}
	return netip.Addr{}, true
}

// numericLabel reports whether a DNS label reads as a number: decimal
// digits, or 0x followed by hex digits (or nothing).
func numericLabel(l string) bool {
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		return strings.Trim(l[2:], "0123456789abcdefABCDEF") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

// parseInetAton reads s as inet_aton(3) does: a.b.c.d, a.b.c (c 16 bits),
// a.b (b 24 bits) or a (32 bits), each part decimal, 0-prefixed octal or
// 0x-prefixed hex.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v [4]uint64
	for i, p := range parts {
		n, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		v[i] = n
	}
	last := len(parts) - 1
	for i := range last {
		if v[i] > 0xff {
			return netip.Addr{}, false
		}
	}
	if v[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	var a uint64
	for i := range last {
		a |= v[i] << (8 * (3 - i))
	}
	a |= v[last]
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), true
}

// atonPart reads one part of an inet_aton address; at most 32 bits.
func atonPart(p string) (uint64, bool) {
	base, digits := uint64(10), p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true // "0x" is 0, as glibc reads it
		}
	case len(p) >= 2 && p[0] == '0':
		base, digits = 8, p[1:]
	case p == "":
		return 0, false
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		n = n*base + d
		if n > 0xffffffff {
			return 0, false
		}
	}
	return n, true
}

// isLocalName reports whether host names this machine whatever DNS says:
// localhost and every name under it (RFC 6761 section 6.3, which resolvers
// answer with loopback), and the loopback aliases /etc/hosts files carry
// (localhost.localdomain, ip6-localhost, ip6-loopback).
func IsLocalName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	switch h {
	case "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback":
		return true
	}
	return strings.HasSuffix(h, ".localhost")
}

// Control is the dialer's Control hook: address is the resolved IP:port
// about to be connected to.
func (g *Guard) Control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &Refused{Detail: address}
	}
	if !g.allowed(ap.Addr()) {
		return &Refused{Addr: ap.Addr(), Loopback: ap.Addr().Unmap().IsLoopback(), Detail: ap.Addr().String()}
	}
	return nil
}

// allowed reports whether the guard lets a connection reach ip.
func (g *Guard) allowed(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range g.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	if ip.IsLoopback() {
		return g.AllowLoopback
	}
	return IsPublic(ip)
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
	netip.MustParsePrefix("100:0:0:1::/64"),  // dummy prefix, RFC 9780
	netip.MustParsePrefix("2001:2::/48"),     // benchmarking
	netip.MustParsePrefix("2001:10::/28"),    // ORCHID (deprecated)
	netip.MustParsePrefix("2001:20::/28"),    // ORCHIDv2
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("3fff::/20"),       // documentation, RFC 9637
	netip.MustParsePrefix("5f00::/16"),       // SRv6 SIDs, RFC 9602
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// IPv6 prefixes whose addresses carry an IPv4 address, which is where a
// packet to them ends up: a host, a NAT64 or a relay translates or tunnels
// it there. Such an address is classed by the IPv4 address it carries,
// not by its IPv6 prefix (which netip and the prefixes above would call
// public).
var (
	ipv4Compatible = netip.MustParsePrefix("::/96")           // RFC 4291 2.5.5.1 (deprecated)
	siit           = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated, RFC 2765 / RFC 6145
	nat64          = netip.MustParsePrefix("64:ff9b::/96")    // well-known NAT64 prefix, RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")  // local-use NAT64, RFC 8215
	sixToFour      = netip.MustParsePrefix("2002::/16")       // 6to4, RFC 3056: bits 16-47
	teredo         = netip.MustParsePrefix("2001::/32")       // Teredo, RFC 4380
)

// isPublicAddr reports whether ip is a public unicast address.
func IsPublic(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("") // IPv4-mapped ::ffff:a.b.c.d is a.b.c.d
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range specialPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	if !ip.Is6() {
		return true
	}
	b := ip.As16()
	v4 := func(i int) bool { return IsPublic(netip.AddrFrom4([4]byte(b[i : i+4]))) }
	switch {
	case ipv4Compatible.Contains(ip), siit.Contains(ip), nat64.Contains(ip):
		return v4(12)
	case sixToFour.Contains(ip):
		return v4(2)
	case teredo.Contains(ip):
		// The Teredo server's address, and the client's, stored as the
		// bitwise inverse of the last 32 bits.
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		return v4(4) && IsPublic(client)
	case nat64Local.Contains(ip):
		return nat64LocalPublic(b)
	}
	return true
}

// nat64LocalPublic classes an address of the local-use NAT64 prefix
// 64:ff9b:1::/48, within which a network may use a NAT64 prefix of 48, 56,
// 64 or 96 bits, each carrying the IPv4 address at another place (RFC 6052
// section 2.2: bits 64-71 are zero in the shorter forms, and the suffix
// after the IPv4 address is zero). Nothing in the address says which form
// the network uses, so every form the address is consistent with must
// carry a public address; the /96 form fits every address.
func nat64LocalPublic(b [16]byte) bool {
	zero := func(from, to int) bool {
		for _, x := range b[from:to] {
			if x != 0 {
				return false
			}
		}
		return true
	}
	forms := [][4]byte{{b[12], b[13], b[14], b[15]}} // /96: bits 96-127
	if b[8] == 0 {
		if zero(11, 16) { // /48: bits 48-63 and 72-87
			forms = append(forms, [4]byte{b[6], b[7], b[9], b[10]})
		}
		if zero(12, 16) { // /56: bits 56-63 and 72-95
			forms = append(forms, [4]byte{b[7], b[9], b[10], b[11]})
		}
		if zero(13, 16) { // /64: bits 72-103
			forms = append(forms, [4]byte{b[9], b[10], b[11], b[12]})
		}
	}
	for _, f := range forms {
		if !IsPublic(netip.AddrFrom4(f)) {
			return false
		}
	}
	return true
}

// canonicalAddr is host:port of u, with the scheme's default port, as
// net/http dials it.
func CanonicalAddr(u *url.URL) string {
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
