package poppy

// The SDK's own HTTP client (DefaultHTTPClient, and what NewAgent uses when
// AgentOptions.HTTPClient is nil).
//
// A Company's documents name the hosts the SDK then calls with tokens and
// assertions, so the default client connects only to public addresses
// (server-side request forgery), checked on the address actually
// connected to, after DNS resolution, and, through the environment's proxy,
// on the URL's host before the CONNECT. The rule and the transport that
// enforces it are package internal/netguard's, which poppycheck shares.
// AgentOptions.UnsafeAllowLoopbackHTTP allows loopback;
// AgentOptions.AllowNetworks allows the networks it lists. A
// caller-supplied *http.Client keeps its own policy: the SDK does not
// change how it dials.
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
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/poppyproto/poppy/internal/netguard"
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
var ErrForbiddenAddress = netguard.ErrForbidden

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
	return newDefaultClient(&netguard.Guard{})
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

// newDefaultClient builds DefaultHTTPClient's client with guard g
// (package netguard holds the address rule and the transport).
func newDefaultClient(g *netguard.Guard) *http.Client {
	t := netguard.NewTransport(g, defaultIdleConnTimeout, maxResponseHeaderBytes)
	return &http.Client{Transport: &headerTimeoutTransport{base: t, d: defaultResponseHeaderTimeout}}
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
