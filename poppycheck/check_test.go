package poppycheck_test

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/rules"
	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// person plays the person of an interactive check against the fake: it
// signs in with the fake's programmable User and types the default
// account's credentials.
type person struct {
	srv      *poppytest.Server
	seen     []poppycheck.Visit
	approved []poppycheck.Approval
}

func (p *person) Visit(ctx context.Context, v poppycheck.Visit) error {
	p.seen = append(p.seen, v)
	loc, err := p.srv.Browse(ctx, v.URL)
	if err != nil || loc == "" {
		return err
	}
	// Direct: the browser follows the redirect to the agent's callback.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	resp, err := p.srv.Client().Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (p *person) Ask(_ context.Context, q poppycheck.Question) (string, error) {
	switch q.Name {
	case "email":
		return "user@example.test", nil
	case "password":
		return "correct horse", nil
	case "code":
		return p.srv.SignIn().LastCode(), nil
	}
	return "", nil
}

// Approve approves every operation, as the person of a test who named
// the action (Options.Propose) would; it records what it was shown.
func (p *person) Approve(_ context.Context, a poppycheck.Approval) (bool, error) {
	p.approved = append(p.approved, a)
	return true, nil
}

// failedSignIns turns on the probe of CO-4.7-06.
func failedSignIns(*poppytest.Server) *poppycheck.Options {
	return &poppycheck.Options{FailedSignIns: true}
}

// proposeExchange is an interactive run that proposes the fake's jacket
// exchange and confirms it (the probe of CO-OPS6-01).
func proposeExchange(srv *poppytest.Server) *poppycheck.Options {
	return &poppycheck.Options{Person: &person{srv: srv}, Propose: &poppycheck.Proposal{
		Method: http.MethodPost, URL: srv.EndpointURL(poppytest.EndpointAPI) + "/orders/ord_7Hk2/exchanges", Body: []byte(`{"item_id":"itm_4Qa"}`),
	}}
}

// slowOps is a fake whose operations stay in_progress, with Direct
// Sign-In alone (the operation probe needs one signed-in Session).
func slowOps(omitRetryAfter bool) poppytest.Options {
	return poppytest.Options{
		SignIn:     poppytest.SignInPolicy{Disable: []string{"device", "mediated"}},
		Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow, RetryAfter: 1, OmitRetryAfter: omitRetryAfter},
	}
}

// richOptions turn on what the default fake leaves off, so that the rules
// about it can be seen: streams with text-delta pieces, nonces, resources
// and a redirect of the well-known URL.
func richOptions() *poppytest.Options {
	return &poppytest.Options{
		Tokens:        poppytest.TokenPolicy{RequireNonce: true, RotateNonce: true},
		API:           poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/v1"},
		Discovery:     poppytest.DiscoveryOptions{RedirectWellKnown: []string{"https://provider.test/example/poppy.json"}},
		SignIn:        poppytest.SignInPolicy{RotateAccountTokens: true, RequireCode: true, DeviceInterval: time.Second},
		Conversations: poppytest.ConversationOptions{Streaming: true, TextDeltas: true, Resource: "https://api.example.test/poppy/conversations", Heartbeats: true},
		Operations:    poppytest.OperationsOptions{Resource: "https://api.example.test/poppy/operations"},
	}
}

// TestDefaultFake: against the default fake, the check fails no rule, and
// every rule it doesn't see has a reason the catalog gives (none is left
// "not reached").
func TestDefaultFake(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	rep := runAgainst(t, srv, nil)
	if rep.Aborted != "" {
		t.Fatalf("aborted: %s", rep.Aborted)
	}
	for _, r := range rep.Failed() {
		t.Errorf("%s failed on the default fake: %s (%s)", r.Rule, r.Detail, r.Step)
	}
	for _, r := range rep.Results {
		if r.Status == poppycheck.NotObserved && r.Reason == "not reached in this run" {
			t.Errorf("%s: not observed and no reason", r.Rule)
		}
	}
	if n := rep.Count(poppycheck.Passed); n < 70 {
		t.Errorf("%d rules passed on the default fake, want at least 70", n)
	}
	if got, want := len(rep.Results), coCount(); got != want {
		t.Errorf("%d results, want one per Company rule (%d)", got, want)
	}
}

func coCount() int {
	n := 0
	for _, r := range rules.All() {
		if strings.HasPrefix(r.ID, "CO-") && !r.Withdrawn {
			n++
		}
	}
	return n
}

// TestEveryObservableRule: over the default fake, a fake with everything
// optional turned on, and an interactive run, every Company rule the
// check doesn't declare unobservable (docs/check.md) passes.
func TestEveryObservableRule(t *testing.T) {
	passed := map[string]bool{}
	reasons := map[string]string{}
	add := func(rep *poppycheck.Report) {
		for _, r := range rep.Failed() {
			t.Errorf("%s failed: %s (%s)", r.Rule, r.Detail, r.Step)
		}
		for _, r := range rep.Results {
			if r.Status == poppycheck.Passed {
				passed[r.Rule] = true
			} else {
				reasons[r.Rule] = r.Reason
			}
		}
	}
	// The default fake with the opt-in probe of failed Mediated Sign-Ins
	// (CO-4.7-06).
	add(runWith(t, poppytest.NewServer(t, nil), &poppycheck.Options{FailedSignIns: true}))
	// An operation proposed and confirmed that stays in_progress
	// (CO-OPS6-01).
	slow := slowOps(false)
	ops := poppytest.NewServer(t, &slow)
	add(runWith(t, ops, proposeExchange(ops)))
	rich := poppytest.NewServer(t, richOptions())
	p := &person{srv: rich}
	rep := runAgainst(t, rich, p)
	if rep.Aborted != "" {
		t.Fatalf("aborted: %s", rep.Aborted)
	}
	add(rep)
	if len(p.seen) != 2 {
		t.Errorf("the person was asked to visit %d pages, want 2 (Direct and Device)", len(p.seen))
	}
	for _, v := range p.seen {
		if !strings.HasPrefix(v.URL, "https://auth.example.test/") {
			t.Errorf("visit %s: %s", v.Type, v.URL)
		}
	}
	// A Company that ends the Sessions at sign-out, and checks sign-in
	// only when a token is issued.
	ends := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{EndSessionsOnSignOut: true, Disable: []string{"device", "mediated"}}})
	add(runAgainst(t, ends, &person{srv: ends}))
	lax := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{NoLiveSignInCheck: true, Disable: []string{"device"}}})
	add(runAgainst(t, lax, &person{srv: lax}))
	for id, reason := range poppycheck.Unobservable() {
		if passed[id] {
			t.Errorf("%s passed, yet the catalog says it can't be seen: %s", id, reason)
		}
	}
	for _, r := range rules.All() {
		if !strings.HasPrefix(r.ID, "CO-") || r.Withdrawn {
			continue
		}
		if _, declared := poppycheck.Unobservable()[r.ID]; !declared && !passed[r.ID] {
			t.Errorf("%s: observable by the catalog, but no run passed it (%s)", r.ID, reasons[r.ID])
		}
	}
	t.Logf("%d Company rules seen passing, %d declared unobservable", len(passed), len(poppycheck.Unobservable()))
}

// A knob is one Options switch and what the check must make of it.
type knob struct {
	name string // the Options field path
	opts poppytest.Options
	rule string // the rule the check reports failed
	// also are the other rules the switch breaks, which the check
	// reports failed too; no other rule may fail.
	also  []string
	after func(*poppytest.Server)
	// check, if set, gives the check's options: the opt-in probe that
	// sees the rule.
	check func(*poppytest.Server) *poppycheck.Options
}

// misconfigurations lists every switch of poppytest.Options that makes
// the Company break a rule (the Misconfig group and the others that break
// one), each with the rule the check must report as failed. Each rule is
// also named in a comment, as the conformance document counts them.
var misconfigurations = []knob{
	// CO-3-06
	{name: "Misconfig.OrganizationDomain", opts: poppytest.Options{Misconfig: poppytest.Misconfig{OrganizationDomain: "other.test"}}, rule: "CO-3-06"},
	// CO-3-05
	{name: "Misconfig.DropOrganization", opts: poppytest.Options{Misconfig: poppytest.Misconfig{DropOrganization: true}}, rule: "CO-3-05"},
	// CO-3-07
	{name: "Misconfig.IssuerInDocument", opts: poppytest.Options{Misconfig: poppytest.Misconfig{IssuerInDocument: "http://auth.example.test"}}, rule: "CO-3-07"},
	// CO-3.2-02: a trailing slash, so the metadata's issuer no longer matches exactly.
	{name: "Misconfig.IssuerInDocument", opts: poppytest.Options{Misconfig: poppytest.Misconfig{IssuerInDocument: "https://auth.example.test/"}}, rule: "CO-3.2-02"},
	// CO-3.2-02
	{name: "Misconfig.MetadataIssuer", opts: poppytest.Options{Misconfig: poppytest.Misconfig{MetadataIssuer: "https://auth.other.test"}}, rule: "CO-3.2-02"},
	// CO-3.2-03
	{name: "Misconfig.PoppyDomains", opts: poppytest.Options{Misconfig: poppytest.Misconfig{PoppyDomains: []string{"other.test"}}}, rule: "CO-3.2-03"},
	// CO-3.2-04
	{name: "Misconfig.OmitMetadata", opts: poppytest.Options{Misconfig: poppytest.Misconfig{OmitMetadata: []string{"revocation_endpoint"}}}, rule: "CO-3.2-04"},
	// CO-3.2-05
	{name: "Misconfig.OmitMetadata", opts: poppytest.Options{Misconfig: poppytest.Misconfig{OmitMetadata: []string{"device_authorization_endpoint"}}}, rule: "CO-3.2-05"},
	// CO-3-03
	{name: "Misconfig.InsecureRedirect", opts: poppytest.Options{Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"http://provider.test/example/poppy.json"}}, Misconfig: poppytest.Misconfig{InsecureRedirect: true}}, rule: "CO-3-03"},
	// CO-3-06: the document at the end of the redirect speaks for the provider.
	// CO-3-02: the document at the end of the redirect doesn't speak for the domain asked.
	{name: "Misconfig.ProviderDomain", opts: poppytest.Options{Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"https://provider.test/example/poppy.json"}}, Misconfig: poppytest.Misconfig{ProviderDomain: "provider.test"}}, rule: "CO-3-06", also: []string{"CO-3-02"}},
	// CO-3-04: a protocol_version that isn't major.minor.
	{name: "Discovery.ProtocolVersion", opts: poppytest.Options{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "1"}}, rule: "CO-3-04"},
	// CO-3-07: apis and agent without auth.
	{name: "Discovery.DropAuth", opts: poppytest.Options{Discovery: poppytest.DiscoveryOptions{DropAuth: true}}, rule: "CO-3-07"},
	// CO-6-07
	{name: "MCP.AuthorizationServers", opts: poppytest.Options{MCP: poppytest.MCPServingOptions{AuthorizationServers: []string{"https://auth.other.test"}}}, rule: "CO-6-07"},
	// CO-5-17
	{name: "Web.SameSite", opts: poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}}, rule: "CO-5-17"},
	// CO-7.2-06: IDs without a kind prefix (a SHOULD).
	{name: "Conversations.OddIDs", opts: poppytest.Options{Conversations: poppytest.ConversationOptions{OddIDs: true}}, rule: "CO-7.2-06"},
	// CO-4.2-07: Session Tokens that last two days (a SHOULD).
	{name: "Tokens.TTL", opts: poppytest.Options{Tokens: poppytest.TokenPolicy{TTL: 48 * time.Hour}}, rule: "CO-4.2-07"},
	// CO-3-10: Discovery.DocumentFields replaces a member the protocol defines; here an API entry without description.
	{name: "Discovery.DocumentFields", opts: poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"apis": []any{map[string]any{"type": "openapi", "url": "https://api.example.test/openapi.json"}}}}}, rule: "CO-3-10"},
	// CO-3.3-01: Discovery.DocumentFields again, with an extension whose plain name the protocol doesn't define.
	{name: "Discovery.DocumentFields", opts: poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"extensions": map[string]any{"giftwrap": map[string]any{"version": "1"}}}}}, rule: "CO-3.3-01"},
	// CO-3.3-01: Noise adds "x_unknown" to every JSON object, the extensions
	// map included, where a member's name is an extension's name.
	// CO-4.4-03: and to custom_scopes, where it is a scope without a
	// description.
	{name: "Noise", opts: poppytest.Options{Noise: true}, rule: "CO-3.3-01", also: []string{"CO-4.4-03"}},
	// CO-7.4-06: Conversations.Noise adds context to the Company's messages.
	{name: "Conversations.Noise", opts: poppytest.Options{Conversations: poppytest.ConversationOptions{Noise: true}}, rule: "CO-7.4-06"},
	// CO-4.7-06: no rate limit on failed Mediated Sign-Ins, seen by the
	// opt-in probe (Options.FailedSignIns).
	{name: "SignIn.MediatedFailuresPerMinute", opts: poppytest.Options{SignIn: poppytest.SignInPolicy{MediatedFailuresPerMinute: -1}}, rule: "CO-4.7-06", check: failedSignIns},
	// CO-4.7-06: a limit above the 5 of REQUIREMENTS.md's reading (the 6th
	// attempt within a minute is refused).
	{name: "SignIn.MediatedFailuresPerMinute", opts: poppytest.Options{SignIn: poppytest.SignInPolicy{MediatedFailuresPerMinute: 6}}, rule: "CO-4.7-06", check: failedSignIns},
	// CO-OPS6-01: in_progress without Retry-After, seen by the opt-in
	// operation probe (Options.Propose, interactive).
	{name: "Operations.OmitRetryAfter", opts: slowOps(true), rule: "CO-OPS6-01", check: proposeExchange},
	// CO-OPS4-01: a new operation for an action already open, seen by the
	// same opt-in probe, which asks for the action twice.
	{name: "Operations.ProposeAgain", opts: poppytest.Options{
		SignIn:     poppytest.SignInPolicy{Disable: []string{"device", "mediated"}},
		Operations: poppytest.OperationsOptions{ProposeAgain: true},
	}, rule: "CO-OPS4-01", check: proposeExchange},
}

// runtimeKnobs are the Server's methods that bend one answer against a
// rule.
var runtimeKnobs = []knob{
	// CO-4.2-05: a DPoP token answered as token_type Bearer.
	{name: "SetTokenType", rule: "CO-4.2-05", after: func(s *poppytest.Server) { s.Tokens().SetType("Bearer") }},
	// CO-4.2-06: expires_in 0.
	{name: "SetExpiresIn", rule: "CO-4.2-06", after: func(s *poppytest.Server) { s.Tokens().SetExpiresIn(0, 1) }},
	// CO-4.3-21: a 429 without Retry-After.
	{name: "RateLimit", rule: "CO-4.3-21", after: func(s *poppytest.Server) { s.Faults().RateLimit(poppytest.EndpointAPI, 1, "") }},
}

// unseenKnobs are switches that break a rule the check can't see from
// outside, with the rule: the check reports it not observed, with the
// catalog's reason.
var unseenKnobs = []knob{} // none today: Operations.ProposeAgain (CO-OPS4-01) is seen by the operation probe

// conformantKnobs are the other fields of poppytest.Options: each keeps
// the Company conformant (the check must fail nothing for them: the
// default and rich runs above use many), or is a bound on the fake itself.
var conformantKnobs = map[string]string{
	"Domains": "names the Company", "Issuer": "names the Company", "AgentHosts": "the agents' hosts",
	"Tokens.SessionLifetime": "the Company decides how long a Session lasts", "Discovery.PoppyCacheControl": "caching is the Company's choice",
	"Discovery.MetadataCacheControl": "caching is the Company's choice", "Tokens.RequireNonce": "a MAY (TestEveryObservableRule)",
	"Tokens.RotateNonce": "a MAY", "Clients.RequireRegistration": "policy (CO-4.1-05)", "Clients.Registered": "policy", "Clients.Allowlist": "policy",
	"Clients.Blocklist": "policy", "Clients.MaxNew": "policy (CO-4.1-09)", "Clients.SessionStartsPerMinute": "policy (CO-4.1-08)",
	"API.Resource": "a MAY", "SignIn.CustomScopes": "a MAY; a poppy: name is a configuration error", "SignIn.Disable": "a choice",
	"Tokens.EmbedCredentials": "encrypted (CO-4.2-13)", "Tokens.JWT": "tokens are opaque", "Tokens.RevokeOnReissue": "a choice (PA-4.3-25)",
	"Discovery.Extensions": "validated (CO-3.3-01)", "Discovery.DropAgent": "optional", "Discovery.DropAPIs": "optional", "Discovery.DropWeb": "optional",
	"Discovery.DropBrowserSession": "optional", "Discovery.RedirectWellKnown": "a MAY (CO-3-02)", "Discovery.RedirectStatuses": "any redirect status",
	"SignIn.Accounts": "the Company's accounts", "SignIn.MediatedFields": "the Company's fields", "SignIn.Scopes": "validated (CO-3-11)",
	"SignIn.NarrowScopesOnly": "a MAY (CO-4.4-05)", "SignIn.StrictResourceIndicators": "a strict reading of RFC 8707 section 2.2", "SignIn.AccountTokenTTL": "a choice", "SignIn.RotateAccountTokens": "a MAY (CO-4.8-09)",
	"SignIn.RotationGrace": "a choice", "SignIn.DeviceCodeTTL": "a choice", "SignIn.DeviceInterval": "a choice", "SignIn.OmitInterval": "RFC 8628 default",
	"SignIn.RequireCode": "a SHOULD kept", "SignIn.UnusualOnNewKey": "a SHOULD kept", "SignIn.CodeTTL": "a choice", "SignIn.CodeAttempts": "a choice",
	"SignIn.EndSessionsOnSignOut": "a MAY (CO-4.9-02)", "SignIn.NoLiveSignInCheck": "with short tokens, as CO-4.9-04 asks",
	"Operations.Resource": "a MAY", "Operations.RequireOperations": "a choice (CO-OPS2-04)", "Operations.TTL": "a choice",
	"Operations.UserApprovalRequired": "a choice", "Operations.Perform": "what the performer does",
	"Operations.SlowFor": "a choice", "Operations.RetryAfter": "a choice", "Operations.Faults": "injected network faults",
	"Operations.ProposeFaults": "injected network faults",
	"Web.Subdomains":           "hosts", "Web.CookieName": "a choice", "Web.CookieTTL": "a choice", "Web.RevokeOnRejoin": "a choice",
	"MCP.SecondServer": "a second server", "MCP.OnAPIHost": "where the server is", "MCP.OtherServers": "tests' own servers",
	"Conversations.Streaming": "a MAY", "Conversations.TextDeltas": "a MAY", "Conversations.MaxWait": "a MAY (CO-7.5-05)",
	"Conversations.PageSize": "paging", "Conversations.CloseStreamAfter": "a MAY (CO-7.6-03)", "Conversations.Heartbeats": "SSE comments",
	"Conversations.StreamIgnoresCursor": "a reading of spec 7.6 (A-27)",
	"Conversations.Resource":            "a MAY", "Conversations.Agent": "the test scripts the Company Agent",
	"Conversations.ReplyDelay": "timing", "Conversations.Retention": "a choice",
	"Load.LogSize": "the fake's own bound", "Load.ViolationsOnly": "the fake's own bound", "Load.MaxViolations": "the fake's own bound",
	"Load.ForgetTokensAfter": "the fake's own bound", "Load.BodyLogBytes": "the fake's own bound", "Load.LogBytes": "the fake's own bound",
}

// TestEveryKnobClassified fails when poppytest.Options gains a field that
// none of the tables above names: a new switch needs a check (or a reason
// why it breaks nothing).
func TestEveryKnobClassified(t *testing.T) {
	named := map[string]bool{}
	for _, k := range append(slices.Clone(misconfigurations), unseenKnobs...) {
		named[k.name] = true
	}
	for k := range conformantKnobs {
		named[k] = true
	}
	var walk func(prefix string, ty reflect.Type)
	walk = func(prefix string, ty reflect.Type) {
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			name := prefix + f.Name
			if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == ty.PkgPath() {
				walk(name+".", f.Type)
				continue
			}
			if !named[name] {
				t.Errorf("poppytest.Options.%s is neither a misconfiguration the check finds nor classified as conformant", name)
			}
			delete(named, name)
		}
	}
	walk("", reflect.TypeOf(poppytest.Options{}))
	for name := range named {
		t.Errorf("the tables name %s, which poppytest.Options doesn't have", name)
	}
}

// TestMisconfigurations: each switch that breaks a rule is reported as
// that rule failed, with the request and the answer: CO-3-03, CO-3-04,
// CO-3-05, CO-3-06, CO-3-07, CO-3-10, CO-3.2-02, CO-3.2-03, CO-3.2-04,
// CO-3.2-05, CO-3.3-01, CO-4.2-05, CO-4.2-06, CO-4.2-07, CO-4.3-21,
// CO-4.7-06, CO-5-17, CO-6-07, CO-7.2-06, CO-7.4-06, CO-OPS6-01.
func TestMisconfigurations(t *testing.T) {
	for _, k := range append(slices.Clone(misconfigurations), runtimeKnobs...) {
		t.Run(k.name+"/"+k.rule, func(t *testing.T) {
			t.Parallel() // each run has a fake of its own; most of a run is waiting on long polls
			opts := k.opts
			srv := poppytest.NewServer(t, &opts)
			if k.after != nil {
				k.after(srv)
			}
			copts := &poppycheck.Options{}
			if k.check != nil {
				copts = k.check(srv)
			}
			rep := runWith(t, srv, copts)
			r, _ := rep.Result(k.rule)
			if r.Status != poppycheck.Failed {
				t.Fatalf("%s: %s (%s), want failed", k.rule, r.Status, r.Reason)
			}
			// Only the rules the switch breaks: a false failure is as
			// much a defect of the check as a missed one.
			want := append([]string{k.rule}, k.also...)
			for _, f := range rep.Failed() {
				if !slices.Contains(want, f.Rule) {
					t.Errorf("%s failed too, which the switch doesn't break: %s (%s)", f.Rule, f.Detail, f.Step)
				}
			}
			for _, id := range k.also {
				if r, _ := rep.Result(id); r.Status != poppycheck.Failed {
					t.Errorf("%s: %s (%s), want failed", id, r.Status, r.Reason)
				}
			}
			if r.Evidence == nil || r.Evidence.Method == "" || r.Evidence.URL == "" {
				t.Errorf("%s failed without the request and the answer: %+v", k.rule, r.Evidence)
			}
			if r.Text == "" {
				t.Errorf("%s: no rule text", k.rule)
			}
			t.Logf("%s failed: %s", k.rule, r.Detail)
		})
	}
}

// TestUnseenKnobs: the switches whose rule needs what the check never
// does are reported not observed, with the reason.
func TestUnseenKnobs(t *testing.T) {
	for _, k := range unseenKnobs {
		t.Run(k.name, func(t *testing.T) {
			opts := k.opts
			srv := poppytest.NewServer(t, &opts)
			rep := runAgainst(t, srv, nil)
			r, _ := rep.Result(k.rule)
			if r.Status != poppycheck.NotObserved || r.Reason != poppycheck.Unobservable()[k.rule] {
				t.Errorf("%s: %s (%q)", k.rule, r.Status, r.Reason)
			}
		})
	}
}

// TestTable: the table names every rule once, and a failure's rule text,
// request and answer.
func TestTable(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	rep := runAgainst(t, srv, nil)
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, r := range rules.All() {
		if strings.HasPrefix(r.ID, "CO-") && !r.Withdrawn && !strings.Contains(out, "\n"+r.ID+" ") {
			t.Errorf("the table has no line for %s", r.ID)
		}
	}
	// CO-5-17
	for _, want := range []string{"FAILED CO-5-17: The cookie is SameSite Lax or None, never Strict.", "request: POST https://example.test/poppy/browser-session", "answer:  303", "Set-Cookie: poppytest_session=«sha256:", "1 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	if testing.Verbose() {
		t.Log(out)
	}
}
