package operations

// Proposal keys (A-38): what makes two proposing requests "the same
// action". A request is keyed on its method, its URL (host in lower case,
// query parameters sorted by name) and its body as canonical JSON (members
// sorted, no insignificant space) when it is JSON of at most 8 MiB, else
// byte for byte; an MCP tool call on the server, the tool and its
// arguments as canonical JSON (ToolCallKey).

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/wire"
)

// maxKeyedBody bounds a replayable request body proposalKey hashes;
// maxCanonicalBody bounds the JSON body it reads into memory to key it as
// canonical JSON (a larger one is keyed byte for byte).
const (
	maxKeyedBody     = 64 << 20
	maxCanonicalBody = 8 << 20
)

// keyPrefix starts every proposal key of a request, as "mcp-"
// starts ToolCallKey's.
const keyPrefix = "r2-"

// proposalKey identifies a proposing request, "the same action":
// the method; the URL with its host in lower case, without a default port
// or fragment, and its query parameters sorted by name (the values of one
// name keep their order); and the body: canonical JSON (members sorted by
// name, no insignificant space, strings and numbers as JSON reads them)
// when the Content-Type is JSON and the body is valid UTF-8 JSON of at
// most 8 MiB without a repeated member name, otherwise its bytes. So
// reordered JSON members or query parameters are the same request; any
// other difference is another one. It leaves req's body readable.
func proposalKey(req *http.Request) (string, error) {
	body, err := keyBody(req)
	if err != nil {
		return "", err
	}
	hk := sha256.New()
	fmt.Fprintf(hk, "%s %s\n", req.Method, canonicalURL(req.URL))
	if body != nil {
		defer body.Close()
		lr := io.LimitReader(body, maxKeyedBody+1)
		var n int64
		if wire.IsJSON(req.Header.Get("Content-Type")) {
			head, err := io.ReadAll(io.LimitReader(lr, maxCanonicalBody+1))
			if err != nil {
				return "", fmt.Errorf("operations: reading the request body: %w", err)
			}
			n = int64(len(head))
			if canon, ok := canonicalJSONUpTo(head, n); ok {
				hk.Write([]byte("c\n")) // canonical JSON
				hk.Write(canon)
			} else {
				hk.Write([]byte("r\n")) // raw bytes
				hk.Write(head)
				m, err := io.Copy(hk, lr)
				if err != nil {
					return "", fmt.Errorf("operations: reading the request body: %w", err)
				}
				n += m
			}
		} else {
			hk.Write([]byte("r\n"))
			if n, err = io.Copy(hk, lr); err != nil {
				return "", fmt.Errorf("operations: reading the request body: %w", err)
			}
		}
		if n > maxKeyedBody {
			return "", errors.New("operations: request body too large")
		}
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(hk.Sum(nil)), nil
}

// keyBody returns a reader over a copy of req's body, nil for none. A body
// that can be read again (bytes, strings) is read from a copy, streamed; any
// other is read into memory (at most maxBody) and put back.
func keyBody(req *http.Request) (io.ReadCloser, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("operations: reading the request body: %w", err)
		}
		return rc, nil
	}
	b, err := bounded.ReadAll(req.Body, maxBody)
	req.Body.Close()
	if errors.Is(err, bounded.ErrTooLarge) {
		return nil, errors.New("operations: request body too large")
	}
	if err != nil {
		return nil, fmt.Errorf("operations: reading the request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	return io.NopCloser(bytes.NewReader(b)), nil
}

// canonicalURL is u as proposalKey keys it.
func canonicalURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.Scheme = strings.ToLower(c.Scheme)
	c.Host = strings.ToLower(c.Host)
	if c.Scheme == "https" {
		c.Host = strings.TrimSuffix(c.Host, ":443")
	}
	c.Fragment, c.RawFragment, c.ForceQuery = "", "", false
	if q, err := url.ParseQuery(c.RawQuery); err == nil {
		c.RawQuery = q.Encode() // sorted by name; one name's values in order
	}
	return c.String()
}

func canonicalJSONUpTo(b []byte, n int64) ([]byte, bool) {
	if n > maxCanonicalBody {
		return nil, false
	}
	return canonicalJSON(b)
}

// canonicalJSON returns b as canonical JSON: one value, object members
// sorted by name (byte order of the decoded names), no insignificant
// space, strings as encoding/json writes them, numbers as written. It
// reports false for anything that isn't exactly one valid JSON value in
// valid UTF-8, for nesting deeper than maxCanonicalDepth, and for an
// object that repeats a member name (readers differ on which one counts,
// so such a body is keyed byte for byte).
func canonicalJSON(b []byte) ([]byte, bool) {
	if !utf8.Valid(b) || !json.Valid(b) {
		return nil, false
	}
	cj := canonicalizer{in: b, out: make([]byte, 0, len(b))}
	cj.space()
	if !cj.value(0) {
		return nil, false
	}
	cj.space()
	return cj.out, cj.pos == len(b)
}

// maxCanonicalDepth bounds the nesting canonicalJSON follows.
const maxCanonicalDepth = 256

// canonicalizer writes a document json.Valid accepted in canonical form.
type canonicalizer struct {
	in  []byte
	pos int
	out []byte
}

func (c *canonicalizer) space() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(depth int) bool {
	if depth > maxCanonicalDepth || c.pos >= len(c.in) {
		return false
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(depth)
	case ch == '[':
		c.pos++
		c.out = append(c.out, '[')
		c.space()
		if c.pos < len(c.in) && c.in[c.pos] == ']' {
			c.pos++
			c.out = append(c.out, ']')
			return true
		}
		for {
			c.space()
			if !c.value(depth + 1) {
				return false
			}
			c.space()
			if c.pos >= len(c.in) {
				return false
			}
			if c.in[c.pos] == ']' {
				c.pos++
				c.out = append(c.out, ']')
				return true
			}
			c.pos++ // ','
			c.out = append(c.out, ',')
		}
	case ch == '"':
		s, ok := c.str()
		if ok {
			c.out = append(c.out, s...)
		}
		return ok
	default: // a number, true, false or null: as written
		start := c.pos
		for c.pos < len(c.in) && !strings.ContainsRune(",]} \t\n\r", rune(c.in[c.pos])) {
			c.pos++
		}
		c.out = append(c.out, c.in[start:c.pos]...)
		return c.pos > start
	}
}

// str reads a string at pos and returns it in canonical form: as written
// when encoding/json would write it so (no escape, none of <, >, &, U+2028,
// U+2029), else decoded and encoded again.
func (c *canonicalizer) str() ([]byte, bool) {
	start := c.pos
	c.pos++
	plain := true
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case '\\':
			plain = false
			c.pos += 2
			continue
		case '"':
			c.pos++
			raw := c.in[start:c.pos]
			if plain && !htmlOrLineSep(raw) {
				return raw, true
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return nil, false
			}
			enc, _ := json.Marshal(s)
			return enc, true
		}
		c.pos++
	}
	return nil, false
}

// htmlOrLineSep reports whether b holds a byte or rune encoding/json
// escapes in a string although JSON needn't: <, >, &, U+2028, U+2029.
func htmlOrLineSep(b []byte) bool {
	for i, ch := range b {
		switch ch {
		case '<', '>', '&':
			return true
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
				return true
			}
		}
	}
	return false
}

func (c *canonicalizer) object(depth int) bool {
	c.pos++ // '{'
	// Members are written in the order they come, then reordered if they
	// weren't sorted (the output of most encoders already is).
	type member struct {
		key        []byte // the decoded name, to sort by
		start, end int    // name:value in out
	}
	var stack [8]member
	ms := stack[:0]
	c.out = append(c.out, '{')
	base := len(c.out)
	inOrder := true
	for {
		c.space()
		if c.pos >= len(c.in) {
			return false
		}
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		if c.in[c.pos] == ',' {
			c.pos++
			c.space()
			c.out = append(c.out, ',')
		}
		raw := c.pos
		name, ok := c.str()
		if !ok {
			return false
		}
		key := c.in[raw+1 : c.pos-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var decoded string
			if json.Unmarshal(c.in[raw:c.pos], &decoded) != nil {
				return false
			}
			key = []byte(decoded)
		}
		if n := len(ms); n > 0 {
			switch cmp := bytes.Compare(ms[n-1].key, key); {
			case cmp == 0:
				return false // a repeated name
			case cmp > 0:
				inOrder = false
			}
		}
		start := len(c.out)
		c.out = append(c.out, name...)
		c.out = append(c.out, ':')
		c.space()
		c.pos++ // ':'
		c.space()
		if !c.value(depth + 1) {
			return false
		}
		ms = append(ms, member{key: key, start: start, end: len(c.out)})
	}
	if !inOrder {
		slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		sorted := make([]byte, 0, len(c.out)-base)
		for i, m := range ms {
			if i > 0 {
				if bytes.Equal(ms[i-1].key, m.key) {
					return false
				}
				sorted = append(sorted, ',')
			}
			sorted = append(sorted, c.out[m.start:m.end]...)
		}
		c.out = append(c.out[:base], sorted...)
	}
	c.out = append(c.out, '}')
	return true
}

// ToolCallKey is the ProposeOptions.CallKey of a call of the MCP tool
// named tool on the server at serverURL with args (a JSON object, as any
// value json.Marshal takes, or json.RawMessage): the same tool with the
// same arguments, whatever their order or spacing, is the same call.
func ToolCallKey(serverURL, tool string, args any) (string, error) {
	var raw []byte
	switch a := args.(type) {
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return "", fmt.Errorf("operations: tool arguments: %w", err)
		}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("operations: tool arguments: %w", err)
		}
	}
	canon, err := json.Marshal(v) // object keys sorted
	if err != nil {
		return "", fmt.Errorf("operations: tool arguments: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "mcp tools/call %s %s\n", serverURL, tool)
	h.Write(canon)
	return "mcp-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}
