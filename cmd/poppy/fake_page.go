package main

// The page of poppy fake: what the agent under test did, live.
//
// Decision: the page has a loopback listener of its own, plain HTTP
// (--page-addr, default 127.0.0.1 on a free port), apart from the fake
// Company's TLS listener and proxy. A person opens it in any browser
// without trusting the fake's CA or using its proxy, and nothing on it can
// be mistaken for the Company's own website (the fake serves every host of
// the Company, so a page on one of them would be one more page of the
// Company under test). It answers only requests whose Host is the
// listener's loopback address (or localhost), so a web page elsewhere can't
// read it by DNS rebinding, and it sends no CORS headers.
//
// The page is the User's control too (/user/sign-in, /user/codes): a
// person, or a CI script, approves or declines a sign-in and reads a
// one-time code there without a browser. And /violations is the
// violations as JSON, oldest first, for a script.
//
// It is server-rendered HTML with one small script: the server renders
// the live part every 150 ms and, when it changed, pushes it over a
// server-sent event stream; the script swaps it in. No build step, no
// library. It never shows a secret: tokens (Session Tokens, Account
// Tokens), proofs, assertions and codes appear only as a short
// fingerprint, URLs lose their query and any path segment long enough to
// be a token, and no header, form or body of a request is shown.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/rules"
	"github.com/poppyproto/poppy/poppytest"
)

const (
	pageRequests = 200                    // the most recent requests shown
	pageTick     = 150 * time.Millisecond // how often the live part is rendered
)

// fingerprint is what the page shows of a secret.
func fingerprint(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:4])
}

// pageURL is a request URL as the page shows it: no query or fragment,
// no path segment of 32 bytes or more.
func pageURL(u string) string {
	u, _, _ = strings.Cut(u, "?")
	u, _, _ = strings.Cut(u, "#")
	parts := strings.Split(u, "/")
	for i := 3; i < len(parts); i++ {
		if len(parts[i]) >= 32 {
			parts[i] = "…"
		}
	}
	return strings.Join(parts, "/")
}

type pageView struct {
	Domain, Issuer, Proxy string
	Counts                poppytest.Counts
	Violations            []pageViolation
	Requests              []pageRequest
	Sessions              []pageSession
	Conversations         []pageConversation
	Operations            []pageOperation
}

type pageViolation struct {
	Rule, Text, Detail, Method, URL string
	Request                         int
	Agent                           string // client_id and Session
}

type pageRequest struct {
	Index                                  int
	Time                                   string
	Method, URL, Endpoint, Error, Auth, Fp string
	Status                                 int
	Violations                             []string
	Internal, User                         bool
}

type pageSession struct {
	ID, Client, User, Account, AccountToken, Created string
	SignedIn, Ended                                  bool
	Scopes                                           []string
}

type pageConversation struct {
	ID, Status, Responder, Account, Parent string
	Messages, Events                       int
}

type pageOperation struct {
	ID, State, Summary, Session, Account string
	Revision, Performed                  int
}

// ruleText maps rule IDs to their one-line text, as the fake shows it:
// of any agent under test, so "the SDK" of the module's own wording
// (internal/rules) reads "the agent".
var ruleText = func() map[string]string {
	m := map[string]string{}
	r := strings.NewReplacer("The SDK's", "The agent's", "the SDK's", "the agent's", "The SDK", "The agent", "the SDK", "the agent", "SDK", "agent")
	for _, rl := range rules.All() {
		m[rl.ID] = r.Replace(rl.Text)
	}
	return m
}()

// snapshot reads the fake's state into what the page shows.
func snapshot(srv *poppytest.Server, domain string) *pageView {
	v := &pageView{Domain: domain, Issuer: srv.Issuer(), Counts: srv.Counts()}
	for _, x := range fakeViolations(srv, 0) {
		v.Violations = append(v.Violations, pageViolation{Rule: x.Rule, Text: x.Text, Detail: x.Detail,
			Method: x.Method, URL: x.URL, Request: x.Request, Agent: strings.TrimPrefix(x.agentOf(), " ")})
	}
	slices.Reverse(v.Violations)
	reqs := srv.LastRequests(pageRequests)
	for i := len(reqs) - 1; i >= 0; i-- {
		r := reqs[i]
		pr := pageRequest{Index: r.Index, Time: r.Time.Format("15:04:05.000"), Method: r.Method, URL: pageURL(r.URL),
			Endpoint: string(r.Endpoint), Status: r.Status, Error: r.ErrorCode, Violations: r.Violations,
			Internal: r.Internal, User: r.User, Auth: r.AuthScheme, Fp: fingerprint(r.AccessToken)}
		v.Requests = append(v.Requests, pr)
	}
	for _, s := range srv.Sessions().All() {
		v.Sessions = append(v.Sessions, pageSession{ID: s.ID, Client: s.ClientID, User: s.UserID, Account: s.Account,
			AccountToken: fingerprint(s.AccountToken), Created: s.Created.Format("15:04:05"), SignedIn: s.SignedIn,
			Ended: s.Ended, Scopes: s.Scopes})
	}
	slices.SortFunc(v.Sessions, func(a, b pageSession) int { return strings.Compare(b.Created+b.ID, a.Created+a.ID) })
	for _, c := range srv.Conversations().All() {
		v.Conversations = append(v.Conversations, pageConversation{ID: c.ID, Status: c.Status, Responder: c.Responder,
			Account: c.Account, Parent: c.Parent, Messages: len(c.Messages), Events: len(c.Events)})
	}
	for _, o := range srv.Operations().All() {
		var m struct {
			Summary string `json:"summary"`
		}
		_ = json.Unmarshal(o.JSON, &m)
		v.Operations = append(v.Operations, pageOperation{ID: o.ID, State: o.State, Summary: m.Summary, Session: o.SessionID,
			Account: o.Account, Revision: o.Revision, Performed: o.Performed})
	}
	return v
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"noun": noun}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>poppy fake: {{.Domain}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1b1b; background: #fafafa; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: .25em .5em; border-bottom: 1px solid #e4e4e4; vertical-align: top; }
th { background: #f0f0f0; font-weight: 600; } code, .mono { font-family: ui-monospace, monospace; font-size: 12.5px; }
.violation td { background: #fff1f0; } .rule { font-weight: 700; color: #a8071a; white-space: nowrap; }
.ok { color: #237804; } .bad { color: #a8071a; font-weight: 600; } .dim { color: #767676; }
.summary span { margin-right: 1.2em; } #status { float: right; color: #767676; }
</style></head>
<body>
<h1>poppy fake: {{.Domain}} <span id="status">live</span></h1>
<div class="dim">Issuer <code>{{.Issuer}}</code> · agents reach it through the proxy <code>{{.Proxy}}</code> · tokens, proofs and codes are shown only as fingerprints</div>
<div id="live">{{template "live" .}}</div>
<script>
(function () {
  var status = document.getElementById('status');
  var es = new EventSource('events');
  es.onmessage = function (e) {
    document.getElementById('live').innerHTML = JSON.parse(e.data);
    status.textContent = 'live, updated ' + new Date().toLocaleTimeString();
  };
  es.onerror = function () { status.textContent = 'reconnecting…'; };
})();
</script>
</body></html>
{{define "live"}}
<p class="summary"><span><b>{{.Counts.Requests}}</b> {{noun .Counts.Requests "request"}}</span><span class="{{if .Counts.Violations}}bad{{else}}ok{{end}}" id="violation-count"><b>{{.Counts.Violations}}</b> {{noun .Counts.Violations "violation"}}</span><span><b>{{len .Sessions}}</b> {{noun (len .Sessions) "Session"}}</span><span><b>{{.Counts.SignIns}}</b> {{noun .Counts.SignIns "sign-in"}}</span><span><b>{{len .Conversations}}</b> {{noun (len .Conversations) "conversation"}}</span><span><b>{{len .Operations}}</b> {{noun (len .Operations) "operation"}}</span></p>
<h2>Violations: what the agent did wrong</h2>
{{if .Violations}}<table id="violations"><tr><th>Rule</th><th>The rule</th><th>What happened</th><th>Agent</th><th>Request</th></tr>
{{range .Violations}}<tr class="violation" data-rule="{{.Rule}}"><td class="rule">{{.Rule}}</td><td>{{.Text}}</td><td>{{.Detail}}</td><td class="mono">{{.Agent}}</td><td class="mono">{{if .Method}}#{{.Request}} {{.Method}} {{.URL}}{{end}}</td></tr>
{{end}}</table>{{else}}<p class="ok" id="violations">None so far.</p>{{end}}
<h2>Sessions</h2>
{{if .Sessions}}<table><tr><th>Session</th><th>Client</th><th>User ID</th><th>State</th><th>Account</th><th>Scopes</th><th>Account Token</th><th>Started</th></tr>
{{range .Sessions}}<tr><td class="mono">{{.ID}}</td><td class="mono">{{.Client}}</td><td class="mono">{{.User}}</td><td>{{if .Ended}}ended{{else if .SignedIn}}signed in{{else}}signed out{{end}}</td><td>{{.Account}}</td><td>{{range .Scopes}}<code>{{.}}</code> {{end}}</td><td class="mono">{{.AccountToken}}</td><td>{{.Created}}</td></tr>
{{end}}</table>{{else}}<p class="dim">None yet.</p>{{end}}
<h2>Conversations</h2>
{{if .Conversations}}<table><tr><th>Conversation</th><th>Status</th><th>Responder</th><th>Account</th><th>Messages from the agent</th><th>Events</th></tr>
{{range .Conversations}}<tr><td class="mono">{{.ID}}{{if .Parent}} <span class="dim">(Direct, of {{.Parent}})</span>{{end}}</td><td>{{.Status}}</td><td>{{.Responder}}</td><td>{{.Account}}</td><td>{{.Messages}}</td><td>{{.Events}}</td></tr>
{{end}}</table>{{else}}<p class="dim">None yet.</p>{{end}}
<h2>Operations</h2>
{{if .Operations}}<table><tr><th>Operation</th><th>Revision</th><th>State</th><th>Summary</th><th>Performed</th><th>Session</th><th>Account</th></tr>
{{range .Operations}}<tr><td class="mono">{{.ID}}</td><td>{{.Revision}}</td><td>{{.State}}</td><td>{{.Summary}}</td><td>{{.Performed}}</td><td class="mono">{{.Session}}</td><td>{{.Account}}</td></tr>
{{end}}</table>{{else}}<p class="dim">None yet.</p>{{end}}
<h2>Requests <span class="dim">(newest first, the latest {{len .Requests}})</span></h2>
<table id="requests"><tr><th>#</th><th>Time</th><th>Request</th><th>Reached</th><th>Answer</th><th>Token</th><th>Broke</th></tr>
{{range .Requests}}<tr{{if .Violations}} class="violation"{{end}}><td>{{.Index}}</td><td class="mono">{{.Time}}</td><td class="mono">{{.Method}} {{.URL}}{{if .Internal}} <span class="dim">(the fake's own fetch)</span>{{end}}{{if .User}} <span class="dim">(the User)</span>{{end}}</td><td>{{.Endpoint}}</td><td>{{if .Status}}{{.Status}}{{else}}…{{end}} {{.Error}}</td><td class="mono">{{if .Auth}}{{.Auth}} {{.Fp}}{{end}}</td><td class="rule">{{range .Violations}}{{.}} {{end}}</td></tr>
{{end}}</table>
{{end}}`))

// fakePage serves the page of srv.
type fakePage struct {
	userMu sync.Mutex // one /user/sign-in at a time (the User is the fake's)
	srv    *poppytest.Server
	domain string
	proxy  string
	addr   string // the listener's host:port, for the Host check
}

func (p *fakePage) render(name string) ([]byte, error) {
	v := snapshot(p.srv, p.domain)
	v.Proxy = p.proxy
	var b bytes.Buffer
	err := pageTemplate.ExecuteTemplate(&b, name, v)
	return b.Bytes(), err
}

func (p *fakePage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.hostAllowed(r.Host) {
		http.Error(w, "poppy fake: this page answers only on its own loopback address", http.StatusForbidden)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'")
	switch r.URL.Path {
	case "/":
		b, err := p.render("page")
		if err != nil {
			http.Error(w, "poppy fake: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(b)
	case "/events":
		p.events(w, r)
	case "/violations":
		p.violations(w, r)
	case "/user/sign-in":
		p.userSignIn(w, r)
	case "/user/codes":
		p.userCodes(w, r)
	case "/state.json":
		v := snapshot(p.srv, p.domain)
		v.Proxy = p.proxy
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	default:
		http.NotFound(w, r)
	}
}

// violations answers GET /violations?since=N: the violations recorded
// after the first N, oldest first, in the schema of fakeViolation
// (docs/cli.md), with next, the since of the following call.
func (p *fakePage) violations(w http.ResponseWriter, r *http.Request) {
	since := 0
	if q := r.URL.Query().Get("since"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			pageJSON(w, http.StatusBadRequest, map[string]string{"error": "since is the number of violations already read, 0 or more"})
			return
		}
		since = n
	}
	vs := fakeViolations(p.srv, since)
	next := since
	if len(vs) > 0 {
		next = vs[len(vs)-1].Seq
	}
	pageJSON(w, http.StatusOK, map[string]any{"violations": vs, "next": next, "total": p.srv.Counts().Violations})
}

// pageJSON writes v as the JSON answer of a page endpoint.
func pageJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// userSignIn answers POST /user/sign-in: the User decides on a Direct or
// Device Sign-In without a browser. The body is JSON: url (the
// authorization URL or verification_uri_complete) or user_code, decision
// ("approve" or "deny"), account (default: the fake's first), scopes
// (default: every requested one), follow (deliver a Direct Sign-In's
// redirect to the agent). It takes JSON only, so a web page elsewhere
// cannot post it (a cross-site form cannot send application/json without
// a CORS preflight, which the page never answers).
func (p *fakePage) userSignIn(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		pageJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST a JSON object"})
		return
	}
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		pageJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "the body is JSON (Content-Type: application/json)"})
		return
	}
	var req struct {
		URL      string   `json:"url"`
		UserCode string   `json:"user_code"`
		Decision string   `json:"decision"`
		Account  string   `json:"account"`
		Scopes   []string `json:"scopes"`
		Follow   bool     `json:"follow"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		pageJSON(w, http.StatusBadRequest, map[string]string{"error": "the body is not the JSON object documented: " + err.Error()})
		return
	}
	if (req.URL == "") == (req.UserCode == "") {
		pageJSON(w, http.StatusBadRequest, map[string]string{"error": "give url (the sign-in page the agent showed) or user_code, not both"})
		return
	}
	if req.Decision != "approve" && req.Decision != "deny" {
		pageJSON(w, http.StatusBadRequest, map[string]string{"error": `decision is "approve" or "deny"`})
		return
	}
	u := req.URL
	if req.UserCode != "" {
		u = p.srv.EndpointURL(poppytest.EndpointVerification) + "?" + url.Values{"user_code": {req.UserCode}}.Encode()
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	// The fake's programmable User decides, for this page only; poppy
	// fake leaves the User at its default (nil) otherwise.
	p.userMu.Lock()
	p.srv.SignIn().SetUser(func(poppytest.ConsentRequest) poppytest.Consent {
		return poppytest.Consent{Approve: req.Decision == "approve", Account: req.Account, Scopes: req.Scopes}
	})
	loc, err := p.srv.Browse(ctx, u)
	p.srv.SignIn().SetUser(nil)
	p.userMu.Unlock()
	if err != nil {
		pageJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	out := map[string]any{"decision": req.Decision, "redirect": loc}
	if req.Follow && loc != "" {
		status, err := p.follow(ctx, loc)
		if err != nil {
			pageJSON(w, http.StatusBadGateway, map[string]string{"error": "delivering the redirect to the agent: " + err.Error()})
			return
		}
		out["agent_status"] = status
	}
	pageJSON(w, http.StatusOK, out)
}

// follow delivers a Direct Sign-In's redirect to the agent's callback, as
// the User's browser would: a GET through the fake, which serves the
// agent's hosts (--agent).
func (p *fakePage) follow(ctx context.Context, loc string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", poppytest.BrowserUserAgent)
	c := *p.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// userCodes answers GET /user/codes: the one-time codes the Company sent
// the User during Mediated Sign-Ins, oldest first, as the User reads them
// on their phone.
func (p *fakePage) userCodes(w http.ResponseWriter, r *http.Request) {
	type code struct {
		SignInID  string    `json:"sign_in_id"`
		Account   string    `json:"account"`
		Code      string    `json:"code"`
		SentTo    string    `json:"sent_to"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	out := []code{}
	for _, c := range p.srv.SignIn().Outbox() {
		out = append(out, code{SignInID: c.SignInID, Account: c.Account, Code: c.Code, SentTo: c.SentTo, ExpiresAt: c.ExpiresAt})
	}
	pageJSON(w, http.StatusOK, map[string]any{"codes": out})
}

// hostAllowed accepts the listener's own address and localhost on its
// port (DNS rebinding: another name is another site's page).
func (p *fakePage) hostAllowed(host string) bool {
	if host == p.addr {
		return true
	}
	_, port, _ := net.SplitHostPort(p.addr)
	return host == "localhost:"+port
}

// events pushes the live part whenever it changes, until the client goes
// or the page closes.
func (p *fakePage) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "poppy fake: streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	var last [32]byte
	var lastKey [3]int
	var lastRender time.Time
	t := time.NewTicker(pageTick)
	defer t.Stop()
	for first := true; ; first = false {
		// Render only when a request, a violation or a sign-in came, or
		// a second has passed (a request answered since, an operation's
		// state): a fake under load isn't re-rendered on every tick.
		c := p.srv.Counts()
		key := [3]int{c.Requests, c.Violations, c.SignIns}
		if !first && key == lastKey && time.Since(lastRender) < time.Second {
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
			continue
		}
		lastKey, lastRender = key, time.Now()
		b, err := p.render("live")
		if err != nil {
			return
		}
		if sum := sha256.Sum256(b); first || sum != last {
			last = sum
			data, _ := json.Marshal(string(b))
			if _, err := w.Write([]byte("data: " + string(data) + "\n\n")); err != nil {
				return
			}
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// servePage starts the page on ln; the returned function stops it.
func servePage(ln net.Listener, p *fakePage) func() {
	ctx, cancel := context.WithCancel(context.Background())
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() { _ = hs.Serve(ln); close(done) }()
	return func() {
		cancel() // ends the event streams
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = hs.Shutdown(sctx)
		<-done
	}
}
