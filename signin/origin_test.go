package signin_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// onlyAt returns a client for srv that reaches the Company's primary
// domain only at addr (host:port), as when a Company serves poppy.json on
// a non-default port or only at www.: other ways to the same host fail.
func onlyAt(t *testing.T, srv *poppytest.Server, addr string) *http.Client {
	tr := srv.Transport().Clone()
	t.Cleanup(tr.CloseIdleConnections) // before srv.Close: no HTTP/2 GOAWAY wait
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(a)
		switch {
		case a == addr:
			return dial(ctx, network, host+":443")
		case host == strings.Split(addr, ":")[0] || host == "example.test" || host == "www.example.test":
			return nil, errors.New("test: this way to the Company is closed")
		}
		return dial(ctx, network, host+":"+port)
	}
	return &http.Client{Transport: tr}
}

// The pending Direct Sign-In keeps the Company as it was
// given, port and www. included, so that the redirect is exchanged with
// the same Company; and a failure says why.
func TestDirectSignInKeepsTheCompanysOrigin(t *testing.T) {
	for _, c := range []struct{ domain, addr string }{
		{"example.test:8443", "example.test:8443"},
		{"www.example.test", "www.example.test:443"},
	} {
		t.Run(c.domain, func(t *testing.T) {
			srv := poppytest.NewServer(t, nil)
			e := newEnvOn(t, srv, &poppy.AgentOptions{HTTPClient: onlyAt(t, srv, c.addr)})
			co, err := e.Agent.Company(ctx, c.domain)
			if err != nil {
				t.Fatal(err)
			}
			if co.Domain() != c.domain {
				t.Fatalf("Domain() = %q, want %q", co.Domain(), c.domain)
			}
			sess, err := co.Session(ctx, "alice", nil)
			if err != nil {
				t.Fatal(err)
			}
			b := &browser{e: e}
			b.client = onlyAt(t, srv, c.addr)
			res, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), b)
			if err != nil {
				t.Fatal(err)
			}
			if !sess.SignedIn() || res.User != "alice" || res.SessionName != "default" {
				t.Fatalf("signed in %v, result %+v", sess.SignedIn(), res)
			}
		})
	}
}

// A failure the outcome codes don't name says what went wrong, in the
// error and on the callback page.
func TestDirectSignInFailureSaysWhy(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	e := newEnvOn(t, srv, &poppy.AgentOptions{HTTPClient: onlyAt(t, srv, "example.test:8443")})
	co, err := e.Agent.Company(ctx, "example.test:8443")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := co.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.direct.Start(ctx, sess, scopes("poppy:read"))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := srv.Browse(ctx, st.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The Company's token endpoint fails in a way that has no outcome code.
	srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 503, Code: "temporarily_unavailable"})
	resp, err := srv.Client().Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "temporarily_unavailable") {
		t.Fatalf("callback page %d %q", resp.StatusCode, page)
	}
	_, err = e.direct.Wait(ctx, st.State)
	if !errors.Is(err, signin.ErrSignInFailed) || !strings.Contains(err.Error(), "temporarily_unavailable") {
		t.Fatalf("Wait: %v", err)
	}
}
