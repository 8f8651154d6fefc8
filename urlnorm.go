package poppy

// URL comparison for choosing a token's resource (RFC 3986 section 6.2).
//
// A request URL and a listed resource or endpoint URL name the same place
// when they are equal after syntax-based and scheme-based normalisation:
// scheme and host lower-cased, the scheme's default port and a trailing dot
// of the host removed, an empty path made "/", dot segments removed, and
// percent-encodings of unreserved characters decoded and the rest written
// in upper case. "https://API.example.com:443/a/./b%7e" and
// "https://api.example.com/a/b~" are then one URL.

import (
	"net/url"
	"strings"
)

// normURL returns the normalised origin (scheme://host[:port]) and path of
// u, without query or fragment.
func normURL(u *url.URL) (origin, path string) {
	scheme := strings.ToLower(u.Scheme)
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6
	}
	if p := u.Port(); p != "" && !(scheme == "https" && p == "443") && !(scheme == "http" && p == "80") {
		host += ":" + p
	}
	path = normPercent(u.EscapedPath())
	path = removeDotSegments(path)
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host, path
}

// normPercent decodes percent-encoded unreserved characters and upper-cases
// the hex digits of the others (RFC 3986 section 6.2.2.1, 6.2.2.2).
func normPercent(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			b.WriteByte(p[i])
			continue
		}
		c := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(p[i+1 : i+3]))
		}
		i += 2
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// removeDotSegments is RFC 3986 section 5.2.4 for an absolute path.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	r := strings.Join(out, "/")
	if strings.HasPrefix(p, "/") && !strings.HasPrefix(r, "/") {
		r = "/" + r
	}
	return r
}

// pathWithin reports whether path p is prefix or lies below it: prefix
// ends with "/" and starts p, or equals p, or p continues it with "/".
func pathWithin(p, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(p, prefix)
	}
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}
