package poppy

// The module's rules for URLs a Company sends: HTTPS (or loopback http://
// under UnsafeAllowLoopbackHTTP), a host, no user information, and what
// logs and errors may show of one; origins as tokens are guarded by them.
// URL normalisation for resources is in urlnorm.go, tokens in URLs in
// urltokens.go.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// checkURL requires HTTPS, or http:// on a loopback host when the unsafe
// development option is set.
func (a *Agent) checkURL(u *url.URL) error {
	return checkURL(u, a.opts.UnsafeAllowLoopbackHTTP)
}

func checkURL(u *url.URL, allowLoopback bool) error {
	if u == nil || u.Host == "" {
		return fmt.Errorf("%w: no host", ErrInsecureURL)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if allowLoopback && isLoopback(u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s://%s", ErrInsecureURL, u.Scheme, u.Host)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseURL parses raw, a URL a Company sent, with the one check the whole
// module applies to Company URLs: an absolute https:// URL with a host, or
// http:// on a loopback host when the Agent was made with
// UnsafeAllowLoopbackHTTP, without user information, which could make a
// URL shown to the User look like another host's. Its errors match
// ErrInsecureURL. Use it for a URL from a Company's document before
// showing it, opening it or sending anything to it.
func (a *Agent) ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: unparseable URL", ErrInsecureURL)
	}
	if err := a.checkURL(u); err != nil {
		return nil, err
	}
	if u.Opaque != "" || u.User != nil {
		return nil, fmt.Errorf("%w: %s://%s is not a plain absolute URL", ErrInsecureURL, u.Scheme, u.Host)
	}
	return u, nil
}

// endpointOf returns scheme://host/path of u, without query or fragment:
// what errors and logs may show of a URL.
func endpointOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// origin is a URL's origin (RFC 6454) as tokens are guarded by it: scheme
// and host lower-cased, the host without a trailing dot, and the port
// always explicit, in decimal without leading zeros (the scheme's default
// when the URL names none). "https://API.example.com.:0443" and
// "https://api.example.com" are one origin; port 8443 is another.
type origin struct {
	scheme, host, port string
}

// originKey returns u's origin, and false when it has none the SDK would
// send a token to: no host, a scheme other than http and https, or a port
// that isn't a number in 1-65535.
func originKey(u *url.URL) (origin, bool) {
	o := origin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))}
	if o.host == "" {
		return origin{}, false
	}
	p := u.Port()
	switch {
	case p != "":
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return origin{}, false
		}
		o.port = strconv.FormatUint(n, 10)
	case o.scheme == "https":
		o.port = "443"
	case o.scheme == "http":
		o.port = "80"
	default:
		return origin{}, false
	}
	return o, o.scheme == "https" || o.scheme == "http"
}

func hostOnly(hostport string) string {
	if h, _, err := splitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func splitHostPort(hp string) (string, string, error) {
	u := url.URL{Host: hp}
	if u.Port() == "" {
		return "", "", errors.New("no port")
	}
	return u.Hostname(), u.Port(), nil
}

// normHost lower-cases a host, drops the port, a trailing dot and one
// leading "www.".
func normHost(h string) string {
	u := url.URL{Host: h}
	h = strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	return strings.TrimPrefix(h, "www.")
}

// originOf returns scheme://host of u, lower-cased.
func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }
