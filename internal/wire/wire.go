// Package wire holds the small HTTP helpers that several packages of the
// module need, each written once: whether a Content-Type is JSON, closing a
// response so that its connection is reused, what an error or a log may
// show of a URL, and the cause of a *url.Error without its copy of the
// URL.
package wire

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// IsJSON reports whether a Content-Type is JSON: application/json or a
// +json type (RFC 6839), with any parameters.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// drainMax bounds what Drain reads of a body no one reads: a longer body
// costs its connection rather than an unbounded read.
const drainMax = 4 << 10

// Drain discards at most 4 KiB of a response body, so that the connection
// can be reused, then closes it.
func Drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, drainMax)
	resp.Body.Close()
}

// StripQuery drops the query and fragment of a URL, which may carry
// secrets, for errors and logs.
func StripQuery(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		return u[:i]
	}
	return u
}

// URLErrorCause returns the error inside a *url.Error, which would repeat
// the URL (and its query) in an error string; any other error as it is.
func URLErrorCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
