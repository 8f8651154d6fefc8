package poppycheck_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/oidcprovider"
	"github.com/poppyproto/poppy/poppycheck"
)

// oidcProviderBreaks are the rules oidc-provider itself breaks, and why.
// Both are spec 4.4's "Missing, unknown, or unavailable scopes are
// rejected with invalid_scope", seen at oidc-provider's own device
// authorization endpoint (RFC 8628), which the glue of package
// oidcprovider doesn't touch: its scope check (checkScope, in
// lib/actions/authorization/scopes.js of the pinned 9.13.3) reads scope as
// OAuth and OpenID Connect do. Each failure's evidence must be that
// endpoint answering 200 with device codes: oidc-provider took the request
// and the check judged what it made of the scope (not a 401
// invalid_client, which would be the check's own mistake, as when it
// signed its client assertion for the wrong aud).
var oidcProviderBreaks = map[string]string{
	// CO-4.4-07: RFC 8628 section 3.1 makes scope OPTIONAL, and
	// oidc-provider issues device codes for a request without one.
	"CO-4.4-07": "a device authorization without scope is answered with device codes (RFC 8628 makes scope optional), not invalid_scope",
	// CO-4.4-08: oidc-provider refuses only a scope it knows that the
	// client's own scope list leaves out; one it doesn't know it ignores
	// (OpenID Connect Core 1.0 section 3.1.2.1: "Scope values used that
	// are not understood by an implementation SHOULD be ignored"), and
	// the request goes on with none.
	"CO-4.4-08": "a device authorization with an unknown scope is answered with device codes (unknown scope values are ignored, as OpenID Connect has it), not invalid_scope",
}

// TestOIDCProviderCompany runs the check against oidc-provider made a
// Poppy Company (package oidcprovider: oidc-provider's own endpoints, with
// the least glue for what it lacks), signed out as `poppy check` runs by
// default, and with a person who signs in with Direct and Device Sign-In
// (provider.mjs plays the User who approves). The Company fetches the
// check's own client metadata and keys from the check's Agent.Handler, as
// any Company does (nothing about the check is registered beforehand). It
// must report failed exactly the rules oidc-provider breaks
// (oidcProviderBreaks), for the reason given, and every other rule it
// observes passed: a rule reported failed that oidc-provider keeps is a
// false failure of the check.
func TestOIDCProviderCompany(t *testing.T) {
	for _, interactive := range []bool{false, true} {
		name := "signed out"
		if interactive {
			name = "with a person"
		}
		t.Run(name, func(t *testing.T) {
			agent, err := poppycheck.NewAgent("https://agent.test/check/")
			if err != nil {
				t.Fatal(err)
			}
			c := oidcprovider.Start(t, &oidcprovider.Options{Agents: map[string]http.Handler{"agent.test": agent.Handler()}})
			opts := &poppycheck.Options{Agent: agent, HTTPClient: c.Client, MaxDuration: 2 * time.Minute}
			var person *oidcPerson
			if interactive {
				person = &oidcPerson{c: c}
				opts.Person = person
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := poppycheck.Run(ctx, oidcprovider.Domain, opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Aborted != "" || rep.IdentityRefused {
				t.Fatalf("the run stopped early: %q (identity refused: %v)", rep.Aborted, rep.IdentityRefused)
			}
			for _, r := range rep.Failed() {
				why, expected := oidcProviderBreaks[r.Rule]
				switch {
				case !expected:
					t.Errorf("%s reported failed, which oidc-provider keeps: a false failure of the check (or the glue's fault): %s (step %s)\n%s", r.Rule, r.Detail, r.Step, evidence(r))
				case r.Evidence == nil || r.Evidence.URL != oidcprovider.Issuer+"/device/auth" || r.Evidence.Status != http.StatusOK:
					t.Errorf("%s failed, but not because %s: %s\n%s", r.Rule, why, r.Detail, evidence(r))
				}
			}
			for rule := range oidcProviderBreaks {
				if r, _ := rep.Result(rule); r.Status != poppycheck.Failed {
					t.Errorf("%s %s, want failed: %s (%s%s)", rule, r.Status, oidcProviderBreaks[rule], r.Detail, r.Reason)
				}
			}
			// What the glue must do right for the run to see the rest:
			// the Company fetched the check's metadata (no client is
			// registered beforehand), and the OpenAPI description
			// poppy.json lists is served and describes the resource
			// server.
			for _, rule := range []string{"CO-4.1-01", "CO-6-02", "CO-6-03", "CO-6-09", "CO-6-10", "CO-4.3-02"} {
				if r, _ := rep.Result(rule); r.Status != poppycheck.Passed {
					t.Errorf("%s %s, want passed: %s%s", rule, r.Status, r.Detail, r.Reason)
				}
			}
			want := 35 // 37 seen: a floor that a run seeing much less of the Company misses
			if interactive {
				want = 45 // 47 seen
				if !slices.Equal(person.seen, []string{"direct", "device"}) {
					t.Errorf("the person was asked to sign in with %v, want Direct then Device", person.seen)
				}
				for _, rule := range []string{"CO-4.5-03", "CO-4.4-11", "CO-4.8-01", "CO-4.9-01", "CO-4.9-07"} {
					if r, _ := rep.Result(rule); r.Status != poppycheck.Passed {
						t.Errorf("%s %s, want passed: %s%s", rule, r.Status, r.Detail, r.Reason)
					}
				}
			}
			for _, r := range rep.Results {
				if r.Status == poppycheck.NotObserved && r.Reason == "not reached in this run" {
					t.Errorf("%s: not observed, and the report doesn't say why", r.Rule)
				}
				if interactive && r.Status == poppycheck.NotObserved && r.Reason == "needs a signed-in Session: run with --interactive" {
					t.Errorf("%s: not observed in an interactive run, and the report says to run with --interactive", r.Rule)
				}
			}
			if n := rep.Count(poppycheck.Passed); n < want {
				t.Errorf("%d rules passed, want at least %d", n, want)
			}
			t.Logf("%d passed, %d failed, %d not observed, %d requests", rep.Count(poppycheck.Passed), rep.Count(poppycheck.Failed), rep.Count(poppycheck.NotObserved), rep.Requests)
		})
	}
}

// evidence shows a failure's request and answer, as the report has them
// (secrets already fingerprinted).
func evidence(r poppycheck.Result) string {
	e := r.Evidence
	if e == nil {
		return "(no evidence)"
	}
	return fmt.Sprintf("%s %s %s\n→ %d %s%s", e.Method, e.URL, e.RequestBody, e.Status, e.ResponseBody, e.Error)
}

// oidcPerson is the person of an interactive check against oidc-provider:
// a browser that opens the sign-in page, where provider.mjs logs the User
// in and consents, and follows the Direct Sign-In redirect to the check's
// callback (served by Agent.Handler, where the Company's hosts route
// agent.test).
type oidcPerson struct {
	c    *oidcprovider.Company
	seen []string
}

func (p *oidcPerson) Visit(ctx context.Context, v poppycheck.Visit) error {
	p.seen = append(p.seen, v.Type)
	if v.Type == "device" {
		return p.c.ApproveDevice(ctx, v.URL)
	}
	loc, err := p.c.DirectSignIn(ctx, v.URL)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return err
	}
	resp, err := p.c.Client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Ask is never called: the Company offers no Mediated Sign-In.
func (p *oidcPerson) Ask(context.Context, poppycheck.Question) (string, error) {
	return "", errors.New("the oidc-provider Company offers no Mediated Sign-In")
}
