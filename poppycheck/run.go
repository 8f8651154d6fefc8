package poppycheck

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// run runs the steps in order; a step that can't go on says why in
// p.aborted, and later steps that need what it would have learnt don't
// run.
func (p *prober) run(ctx context.Context, target *url.URL) {
	defer func() {
		p.mu.Lock()
		if p.aborted == "" && p.sent >= p.max {
			p.aborted = errBudget.Error()
		}
		p.mu.Unlock()
	}()
	if !p.discover(ctx, target) || !p.metadata(ctx) {
		return
	}
	s := p.startSession(ctx)
	if s == nil {
		return
	}
	p.pass("CO-3.3-02", nil, "the Company started a Session for an agent whose metadata lists an extension it can't know (%s)", probeExtension)
	// The probes that may make the Company issue a token (a scope the
	// Session lacks, a stale proof) use a Session of their own: nothing
	// they get back replaces the main Session's token.
	probe := p.secondSession(ctx, s)
	p.renew(ctx, s)
	p.tokenProbes(ctx, probe)
	p.deviceScopes(ctx)
	var open string
	for _, api := range p.c.apis {
		switch api["type"] {
		case "openapi":
			if o := p.openAPIEntry(ctx, s, api); open == "" {
				open = o
			}
		case "mcp":
			p.mcpServer(ctx, s, api)
		}
	}
	if !hasAPI(p.c.apis, "mcp") {
		p.notObserved("the Company lists no MCP server", "CO-6-04", "CO-6-07", "CO-4.3-11", "CO-4.3-13")
	}
	if !hasAPI(p.c.apis, "openapi") {
		p.notObserved("the Company lists no OpenAPI API", "CO-6-03", "CO-6-09", "CO-6-10")
	}
	if open != "" && hasAPI(p.c.apis, "mcp") {
		p.step = "dpop and bearer together"
		if r, err := p.resourceRequest(ctx, s, http.MethodGet, open, nil, http.Header{"Accept": {"application/json"}}, "", proofOK); err == nil {
			p.check("CO-4.3-13", r.status >= 200 && r.status < 300, r.ex, "after a Bearer token was issued to the Session, its DPoP token still works: %d", r.status)
		}
	}
	var conv map[string]any
	for _, proto := range p.c.protocols {
		if proto["type"] == "poppy" {
			conv = proto
			break
		}
	}
	convSignIn := false
	if conv != nil {
		convSignIn = !p.conversation(ctx, s, conv)
	} else {
		p.notObserved("the Company lists no poppy conversation protocol", "CO-7.3-01", "CO-7.5-06", "CO-7.12-02", "CO-7.5-03")
		p.notObservedUnder("the Company lists no poppy conversation protocol", "CO-7.")
	}
	if _, ok := p.c.exts["operations"]; ok {
		p.operationsEndpoint(ctx, s)
	} else {
		p.notObservedUnder("the Company lists no operations extension", "CO-OPS")
	}
	if p.c.browserEP != "" {
		if ok, _ := p.okURL(p.c.browserEP); ok {
			p.browserSession(ctx, s)
		}
	} else {
		p.notObserved("the Company lists no web.browser_session_endpoint", "CO-5-11", "CO-5-16", "CO-5-17", "CO-5-09", "CO-5-12")
	}
	if p.opts.Person != nil {
		p.interactive(ctx, open, conv, convSignIn)
	}
	// Last, so that a limit it sets off stops no other step (the
	// person's own Mediated Sign-In above included).
	p.mediatedRateLimit(ctx, s)
}

// notObservedUnder says why the rules whose IDs start with prefix were not
// observed, but for those the catalog already explains (unobservable,
// conditional): a Company without conversations, or without the
// operations extension, gets a reason for each of their rules.
func (p *prober) notObservedUnder(reason, prefix string) {
	for _, r := range coRules() {
		if strings.HasPrefix(r.ID, prefix) && unobservable[r.ID] == "" && conditional[r.ID] == "" {
			p.notObserved(reason, r.ID)
		}
	}
}

// openAPIEntry checks one OpenAPI entry and returns the URL of the GET a
// signed-out Session may call, if it found one.
func (p *prober) openAPIEntry(ctx context.Context, s *session, api map[string]any) string {
	if res, _ := api["resource"].(string); res != "" {
		tok, ok := p.resourceToken(ctx, s, res, "CO-3-13")
		if !ok {
			return ""
		}
		saved := s.token
		s.token = tok
		defer func() { s.token = saved }()
		open := p.openAPIRun(ctx, s, api)
		if p.openClosed != "" {
			// The signed-in steps use tokens issued without resource.
			p.openClosed = ""
			if p.opts.Person != nil {
				p.notObserved("the signed-in steps use tokens issued without resource, and the API whose GET needs a sign-in names one", "CO-4.4-13", "CO-4.9-03", "CO-4.9-04", "CO-6-11")
			}
		}
		// A pass at a service whose entry names no resource wins over
		// this.
		p.notObserved("seen at a service whose entry names no resource, and the APIs here name theirs", "CO-4.3-17")
		if open != "" {
			p.pass("CO-3-13", nil, "the API took a token issued for its resource %s", res)
			p.pass("CO-4.3-18", nil, "the API whose entry names resource %s took a token issued for it", res)
		}
		return ""
	}
	open := p.openAPIRun(ctx, s, api)
	if open != "" {
		p.pass("CO-4.3-17", nil, "the Session Token issued without resource works at the API %s", open)
	}
	return open
}

func (p *prober) openAPIRun(ctx context.Context, s *session, api map[string]any) string {
	p.openURL = ""
	p.openAPI(ctx, s, api)
	return p.openURL
}

// secondSession starts another Session for the same User, with the same
// key, and checks that both work (CO-4-02). It returns it (nil if none):
// the probes that may make the Company issue a token use it.
func (p *prober) secondSession(ctx context.Context, s *session) *session {
	p.step = "second session"
	s2 := &session{userID: s.userID, key: s.key, nonces: map[string]string{}}
	r, m, err := p.tokenRequest(ctx, s2, url.Values{"grant_type": {grantJWTBearer}}, false)
	if err != nil || m == nil {
		if r != nil && r.status == http.StatusTooManyRequests {
			p.notObserved("the Company rate-limited the second Session start (a MAY, CO-4.1-08)", "CO-4-02")
		} else if r != nil && r.status != 0 {
			p.fail("CO-4-02", r.ex, "a second Session for the same User answered %d %q", r.status, errorCode(r.body))
		}
		return nil
	}
	id, _ := m["session_id"].(string)
	tok, _ := m["access_token"].(string)
	p.check("CO-4-02", id != "" && id != s.id, r.ex, "a second Session for the same User: session_id %q beside %q", id, s.id)
	if id == "" || id == s.id || tok == "" {
		return nil
	}
	s2.id, s2.token = id, tok
	return s2
}

func hasAPI(apis []map[string]any, typ string) bool {
	for _, a := range apis {
		if a["type"] == typ {
			return true
		}
	}
	return false
}
