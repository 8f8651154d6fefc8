package poppytest_test

// The fake judges the agent, not the person: rules it sees broken are
// recorded with the agent named, and the User's own requests (a real
// browser, curl) are never the agent's violations.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/poppytest"
)

// A proof whose htu is another URL is answered 401 and recorded as the
// agent's violation, naming the agent; an htu that differs only in what
// RFC 3986 normalisation undoes is answered 401 (the fake compares
// strictly) but recorded as none.
func TestPA_4_3_08_WrongHTURecorded(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	tok, sid := start.str("access_token"), start.str("session_id")
	r := a.call("GET", "/products", tok, "", withClaim("htu", srv.EndpointURL(poppytest.EndpointAPI)+"/orders"))
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("wrong htu: %d %s", r.Status, r.Raw)
	}
	vs := srv.TakeViolations()
	// PA-4.3-08
	if len(vs) != 1 || vs[0].Rule != "PA-4.3-08" {
		t.Fatalf("violations = %v, want one PA-4.3-08", vs)
	}
	if vs[0].ClientID != a.clientID || vs[0].SessionID != sid {
		t.Errorf("the violation names client %q, Session %q; want %q, %q", vs[0].ClientID, vs[0].SessionID, a.clientID, sid)
	}
	// An escaped unreserved character names the same URL: no violation.
	r = a.call("GET", "/products", tok, "", withClaim("htu", srv.EndpointURL(poppytest.EndpointAPI)+"/pr%6Fducts"))
	if r.Status != http.StatusUnauthorized {
		t.Errorf("escaped htu: %d %s", r.Status, r.Raw)
	}
	if vs := srv.TakeViolations(); len(vs) != 0 {
		t.Errorf("an equivalent htu recorded %v", vs)
	}
}

// An agent that goes on using a Session Token after it used a newer one
// for the same Session (same type and resource, A-08) breaks PA-4.3-25;
// a request with the old token that arrives while the new one is fresh
// (a race of requests on their way) is none.
func TestPA_4_3_25_SupersededTokenRecorded(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	old, sid := start.str("access_token"), start.str("session_id")
	if r := a.call("GET", "/products", old, ""); r.Status != 200 {
		t.Fatalf("old token: %d %s", r.Status, r.Raw)
	}
	renewed := a.tokenAs("usr_1", a.renewForm("usr_1", sid))
	fresh := renewed.str("access_token")
	if renewed.Status != 200 || fresh == "" || fresh == old {
		t.Fatalf("renewal: %d %s", renewed.Status, renewed.Raw)
	}
	if r := a.call("GET", "/products", fresh, ""); r.Status != 200 {
		t.Fatalf("new token: %d %s", r.Status, r.Raw)
	}
	// On its way before the agent had the new one: no violation.
	a.call("GET", "/products", old, "")
	if vs := srv.TakeViolations(); len(vs) != 0 {
		t.Fatalf("a racing request recorded %v", vs)
	}
	srv.Clock().Advance(10 * time.Second)
	a.call("GET", "/products", old, "")
	vs := srv.TakeViolations()
	// PA-4.3-25
	if len(vs) != 1 || vs[0].Rule != "PA-4.3-25" || vs[0].SessionID != sid || vs[0].ClientID != a.clientID {
		t.Fatalf("violations = %+v, want one PA-4.3-25 naming %s", vs, sid)
	}
}

// The person approving a Device Sign-In with curl, on the verification
// page and its consent form, is the User: no violation, and the agent's
// poll gets its token. The agent opening the page with its own
// credentials is PA-4.4-02.
func TestPA_4_4_02_CurlApprovalIsTheUsers(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		realtest.Missing(t, "curl", "no curl on PATH (install the Debian package curl)")
	}
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceInterval: time.Second}})
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	d := a.deviceStart("poppy:read")
	if d.Status != 200 {
		t.Fatalf("device authorization: %d %s", d.Status, d.Raw)
	}
	proxy, err := srv.ProxyURL()
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.BrowserTrust().CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, curl, append([]string{"-sS", "--fail-with-body", "--proxy", proxy, "--cacert", ca}, args...)...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("curl %v: %v: %s %s", args, err, out, ee.Stderr)
			}
			t.Fatalf("curl %v: %v", args, err)
		}
		return string(out)
	}
	page := run(d.str("verification_uri_complete"))
	m := regexp.MustCompile(`name="user_code" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no consent form: %s", page)
	}
	run("--data-urlencode", "user_code="+m[1], "--data", "decision=approve", "--data", "account=acct_1", "--data", "scope=poppy:read", srv.EndpointURL(poppytest.EndpointVerification))
	srv.Clock().Advance(2 * time.Second)
	if r := a.poll("usr_1", d.str("device_code"), sid); r.Status != 200 || r.str("access_token") == "" {
		t.Fatalf("poll after the approval: %d %s", r.Status, r.Raw)
	}
	// PA-4.4-02: nothing the person did is the agent's.
	if vs := srv.TakeViolations(); len(vs) != 0 {
		t.Fatalf("the person's curl approval recorded %v", vs)
	}
	for _, r := range srv.RequestsTo(poppytest.EndpointVerification) {
		if !r.User {
			t.Errorf("%s %s is not marked as the User's", r.Method, r.URL)
		}
	}
	// The agent opening the page with its Session Token: PA-4.4-02.
	d2 := a.deviceStart("poppy:read")
	tok := a.start("usr_1").str("access_token")
	get(t, srv, d2.str("verification_uri_complete"), "Authorization", "DPoP "+tok)
	wantRules(t, srv, pa("4.4-02"))
}

// A proposing POST whose body never arrives whole (the agent died after
// the headers) is answered 400 and acted on in no way: no operation, and
// its Idempotency-Key is bound to nothing, so the restarted agent's
// retry with the same key proposes (CO-OPS4-02: an operation only for an
// action the request asked for).
func TestCO_OPS4_02_TruncatedBodyActsOnNothing(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	body := `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`
	u := srv.EndpointURL(poppytest.EndpointAPI) + "/orders/ord_7Hk2/exchanges"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The headers and none of the body, on a connection of its own
	// (the fake's TLS listener, trusting its CA), which then breaks.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.BrowserTrust().CAPEM)
	d := tls.Dialer{Config: &tls.Config{ServerName: "api.example.test", RootCAs: pool}}
	conn, err := d.DialContext(ctx, "tcp", srv.BrowserTrust().Addr)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := srv.Tokens().Get(tok)
	head := "POST /orders/ord_7Hk2/exchanges HTTP/1.1\r\nHost: api.example.test\r\nContent-Type: application/json\r\n" +
		"Idempotency-Key: \"k-1\"\r\nAuthorization: DPoP " + tok + "\r\nDPoP: " + a.proof("POST", u, a.userKey(info.UserID), withToken(tok)) +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	// The agent dies: nothing more is sent.
	if err := conn.(*tls.Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the cut request: %v", err)
	}
	resp.Body.Close()
	conn.Close()
	// CO-OPS4-02
	if resp.StatusCode != http.StatusBadRequest || len(srv.Operations().All()) != 0 {
		t.Fatalf("a body that never arrived: answered %d, %d operation(s)", resp.StatusCode, len(srv.Operations().All()))
	}
	r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok, body, http.Header{"Idempotency-Key": {`"k-1"`}})
	if r.Status != http.StatusAccepted {
		t.Fatalf("the retry with the same key: %d %s", r.Status, r.Raw)
	}
}

// The log is bounded by bytes as well as by count: requests with large
// forms push the oldest out, and the latest is always kept.
func TestLogBoundedByBytes(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Load: poppytest.LoadOptions{LogBytes: 64 << 10}})
	big := strings.Repeat("x", 30<<10)
	for range 8 {
		postForm(t, srv, srv.EndpointURL(poppytest.EndpointRevoke), url.Values{"token": {big}})
	}
	reqs := srv.Requests()
	if n := len(reqs); n == 0 || n > 2 {
		t.Fatalf("the log keeps %d requests of 30 KiB forms in 64 KiB", n)
	}
	if last := reqs[len(reqs)-1]; last.Index != srv.Counts().Requests-1 {
		t.Errorf("the latest request (%d) is not kept: last is %d", srv.Counts().Requests-1, last.Index)
	}
	if c := srv.Counts(); c.Dropped < 6 {
		t.Errorf("Dropped = %d, want at least 6", c.Dropped)
	}
}
