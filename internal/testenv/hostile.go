package testenv

// A hostile Company for attack tests: the strict fake behind a transport
// that rewrites what it answers on chosen paths.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Hostile is an http.RoundTripper in front of the fake that lets a test
// change the Company's answers on chosen paths.
type Hostile struct {
	base  http.RoundTripper
	mu    sync.Mutex
	rules map[string]func(req *http.Request, next http.RoundTripper) (*http.Response, error)
}

// NewHostile returns a Hostile in front of base.
func NewHostile(base http.RoundTripper) *Hostile {
	return &Hostile{base: base, rules: map[string]func(*http.Request, http.RoundTripper) (*http.Response, error){}}
}

// On makes fn answer every request for path; next reaches the fake.
func (h *Hostile) On(path string, fn func(req *http.Request, next http.RoundTripper) (*http.Response, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rules[path] = fn
}

// OnJSON rewrites the JSON object of every 200 answer on path (numbers
// decoded as json.Number, so fn may put any digits back).
func (h *Hostile) OnJSON(path string, fn func(m map[string]any)) {
	h.On(path, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var m map[string]any
		if d.Decode(&m) != nil {
			SetBody(resp, b)
			return resp, nil
		}
		fn(m)
		nb, _ := json.Marshal(m)
		SetBody(resp, nb)
		return resp, nil
	})
}

// RoundTrip applies the rule for req's path, if any.
func (h *Hostile) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	fn := h.rules[req.URL.Path]
	h.mu.Unlock()
	if fn != nil {
		return fn(req, h.base)
	}
	return h.base.RoundTrip(req)
}

// SetBody replaces resp's body with b.
func SetBody(resp *http.Response, b []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
}

// Answer is a canned response to req.
func Answer(req *http.Request, status int, h http.Header, body string) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
}
