package poppytest

// The fake as an HTTPS proxy, for child processes that don't import
// poppytest (Server.Env).
//
// Go's standard transport, and so the SDK's default client, sends an https
// request through the proxy HTTPS_PROXY names with CONNECT host:443, and
// trusts the certificates in SSL_CERT_FILE instead of the system's. The
// fake therefore listens on one more loopback port for CONNECT: a tunnel to
// a host the fake serves goes to its TLS listener, where the host's
// certificate, signed by the fake's CA, is served; a tunnel to any other
// host or port is refused with 403, as Client refuses to dial it. The CA
// certificate is written to a file of its own, removed at Close. The proxy
// starts with the first Env call.

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// proxy is the fake's CONNECT proxy.
type proxy struct {
	ln     net.Listener
	srv    *http.Server
	caFile string
	dir    string

	mu     sync.Mutex
	conns  map[net.Conn]bool // hijacked tunnel ends, closed at Close
	closed bool
	wg     sync.WaitGroup
}

// startProxy starts the proxy once and returns it.
func (s *Server) startProxy() (*proxy, error) {
	s.proxyOnce.Do(func() {
		s.proxy, s.proxyErr = s.newProxy()
	})
	return s.proxy, s.proxyErr
}

func (s *Server) newProxy() (*proxy, error) {
	dir, err := os.MkdirTemp("", "poppytest-ca-")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, s.tls.caPEM, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &proxy{ln: ln, caFile: caFile, dir: dir, conns: map[net.Conn]bool{}}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveConnect(p, w, r) }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          discardLogger(),
	}
	go p.srv.Serve(ln)
	return p, nil
}

// serveConnect answers one proxy request: CONNECT to a host the fake
// serves, on port 443, is tunnelled to the TLS listener.
func (s *Server) serveConnect(p *proxy, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "poppytest: the proxy only tunnels https (CONNECT)", http.StatusMethodNotAllowed)
		return
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil || port != "443" || !s.knownHost(canonicalHost(host)) {
		http.Error(w, "poppytest: host not served by the fake: "+r.Host, http.StatusForbidden)
		return
	}
	up, err := net.DialTimeout("tcp", s.ln.Addr().String(), 10*time.Second)
	if err != nil {
		http.Error(w, "poppytest: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "poppytest: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(down, up) {
		return
	}
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.untrack(down, up)
		return
	}
	p.wg.Add(2)
	go p.pipe(up, buf.Reader, down) // buf may hold bytes sent after CONNECT
	go p.pipe(down, up, up)
}

// pipe copies from src to dst, then closes both ends of the tunnel.
func (p *proxy) pipe(dst net.Conn, src io.Reader, other net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.untrack(dst, other)
}

func (p *proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		a.Close()
		b.Close()
		return false
	}
	p.conns[a], p.conns[b] = true, true
	return true
}

func (p *proxy) untrack(a, b net.Conn) {
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
	a.Close()
	b.Close()
}

// close stops the proxy, ends its tunnels and removes the CA file.
func (p *proxy) close() {
	p.srv.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	os.RemoveAll(p.dir)
}

// ErrNoFake is returned by ClientFromEnv in a process whose environment
// names no fake Company (see Server.Env).
var ErrNoFake = errors.New("poppytest: the environment names no fake Company (see Server.Env)")
