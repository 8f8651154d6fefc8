package poppy_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

// discover runs discovery of domain against a fake with opts.
func discover(t *testing.T, opts *poppytest.Options, domain string) (*env, *poppy.Company, error) {
	t.Helper()
	e := newEnv(t, opts, nil)
	c, err := e.agent.Company(ctx, domain)
	return e, c, err
}

// noFurther asserts that after discovery failed, nothing but poppy.json
// (and its redirects) was requested.
func noFurther(t *testing.T, e *env, eps ...poppytest.EndpointKind) {
	t.Helper()
	if len(eps) == 0 {
		eps = []poppytest.EndpointKind{poppytest.EndpointMetadata, poppytest.EndpointToken, poppytest.EndpointAPI}
	}
	if r := sdkRequests(e.srv, eps...); len(r) != 0 {
		t.Fatalf("%d further requests, first %s %s", len(r), r[0].Method, r[0].URL)
	}
}

func TestPA_3_01_WellKnownURL(t *testing.T) {
	e, _, err := discover(t, nil, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	docs := sdkRequests(e.srv, poppytest.EndpointPoppyJSON)
	// PA-3-01
	if len(docs) != 1 || docs[0].URL != "https://example.test/.well-known/poppy.json" || docs[0].Method != "GET" {
		t.Fatalf("requests %v", docs)
	}
	// An http:// domain is refused before any request.
	before := len(e.srv.Requests())
	if _, err := e.agent.Company(ctx, "http://example.test"); !errors.Is(err, poppy.ErrInsecureURL) {
		t.Fatalf("http: err = %v", err)
	}
	if len(e.srv.Requests()) != before {
		t.Fatal("a request was sent for an http:// domain")
	}
}

func TestPA_3_02_FollowsRedirects(t *testing.T) {
	e, c, err := discover(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"https://provider.test/hop", "https://provider.test/example/poppy.json"}, RedirectStatuses: []int{301, 307}},
	}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, r := range sdkRequests(e.srv, poppytest.EndpointPoppyJSON, poppytest.EndpointProvider) {
		urls = append(urls, r.URL)
	}
	// PA-3-02: three GETs in order, the document from the last hop.
	want := []string{"https://example.test/.well-known/poppy.json", "https://provider.test/hop", "https://provider.test/example/poppy.json"}
	if !slices.Equal(urls, want) {
		t.Fatalf("GETs %v, want %v", urls, want)
	}
	if c.Domain() != "example.test" {
		t.Fatalf("domain %q", c.Domain())
	}
}

func TestPA_3_03_InsecureRedirectRefused(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"http://provider.test/example/poppy.json"}},
		Misconfig: poppytest.Misconfig{InsecureRedirect: true},
	}, "example.test")
	// PA-3-03
	if !errors.Is(err, poppy.ErrInsecureRedirect) {
		t.Fatalf("err = %v, want ErrInsecureRedirect", err)
	}
	for _, r := range e.srv.Requests() {
		if r.URL == "http://provider.test/example/poppy.json" {
			t.Fatal("the http:// URL was requested")
		}
	}
	noFurther(t, e)
}

func TestPA_3_04_DocumentCached(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{PoppyCacheControl: "max-age=300"}}, nil)
	count := func() int { return len(sdkRequests(e.srv, poppytest.EndpointPoppyJSON)) }
	e.company("example.test")
	e.srv.Clock().Advance(10 * time.Second)
	e.company("example.test")
	// PA-3-04: one GET within max-age…
	if n := count(); n != 1 {
		t.Fatalf("%d GETs within max-age, want 1", n)
	}
	e.srv.Clock().Advance(291 * time.Second)
	e.company("example.test")
	// …and a second once it has passed, revalidated with the ETag.
	docs := sdkRequests(e.srv, poppytest.EndpointPoppyJSON)
	if len(docs) != 2 || docs[1].Header.Get("If-None-Match") == "" {
		t.Fatalf("%d GETs after max-age (If-None-Match %q)", len(docs), docs[len(docs)-1].Header.Get("If-None-Match"))
	}

	e2 := newEnv(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{PoppyCacheControl: "no-store"}}, nil)
	for range 3 {
		e2.company("example.test")
	}
	// no-store: every discovery fetches.
	if n := len(sdkRequests(e2.srv, poppytest.EndpointPoppyJSON)); n != 3 {
		t.Fatalf("no-store: %d GETs, want 3", n)
	}
}

func TestPA_3_05_NewerMinorAndUnknownFields(t *testing.T) {
	e, c, err := discover(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "0.9", DocumentFields: map[string]any{"x_future": map[string]any{"a": 1}}},
	}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	// PA-3-05: usable, a Session starts.
	if _, err := c.Session(ctx, "alice", nil); err != nil {
		t.Fatal(err)
	}
	_ = e
}

func TestPA_3_06_UnsupportedMajor(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "1.0"}}, "example.test")
	// PA-3-06
	if !errors.Is(err, poppy.ErrUnsupportedProtocolVersion) {
		t.Fatalf("err = %v", err)
	}
	noFurther(t, e)
}

func TestPA_3_07_InvalidVersionOrOrganization(t *testing.T) {
	for _, opts := range []*poppytest.Options{{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "0"}}, {Misconfig: poppytest.Misconfig{DropOrganization: true}}} {
		e, _, err := discover(t, opts, "example.test")
		// PA-3-07
		if !errors.Is(err, poppy.ErrInvalidDocument) {
			t.Fatalf("%+v: err = %v", opts, err)
		}
		noFurther(t, e)
	}
}

func TestPA_3_08_DomainChecked(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{Misconfig: poppytest.Misconfig{OrganizationDomain: "other.test"}}, "example.test")
	// PA-3-08
	if !errors.Is(err, poppy.ErrDomainMismatch) {
		t.Fatalf("err = %v", err)
	}
	noFurther(t, e)
	// A leading www. is ignored.
	if _, _, err := discover(t, nil, "www.example.test"); err != nil {
		t.Fatalf("www.: %v", err)
	}
	if _, _, err := discover(t, nil, "EXAMPLE.test."); err != nil {
		t.Fatalf("case and trailing dot: %v", err)
	}
}

func TestPA_3_09_RedirectHostDoesNotCount(t *testing.T) {
	chain := []string{"https://provider.test/example/poppy.json"}
	e, _, err := discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: chain}, Misconfig: poppytest.Misconfig{ProviderDomain: "provider.test"}}, "example.test")
	// PA-3-09
	if !errors.Is(err, poppy.ErrDomainMismatch) {
		t.Fatalf("err = %v", err)
	}
	noFurther(t, e)
	if _, _, err := discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: chain}}, "example.test"); err != nil {
		t.Fatalf("document for example.test served by provider.test: %v", err)
	}
}

func TestPA_3_10_NoAuthNoSessions(t *testing.T) {
	e, c, err := discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DropAuth: true, DropAgent: true, DropAPIs: true, DropBrowserSession: true}}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	// PA-3-10
	if _, err := c.Session(ctx, "alice", nil); !errors.Is(err, poppy.ErrNoAuth) {
		t.Fatalf("err = %v, want ErrNoAuth", err)
	}
	noFurther(t, e)
}

func TestPA_3_11_AuthRequired(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DropAuth: true}}, "example.test")
	// PA-3-11
	if !errors.Is(err, poppy.ErrInvalidDocument) {
		t.Fatalf("DropAuth: err = %v", err)
	}
	noFurther(t, e)
	e, _, err = discover(t, &poppytest.Options{Misconfig: poppytest.Misconfig{IssuerInDocument: "http://auth.example.test"}}, "example.test")
	if !errors.Is(err, poppy.ErrInvalidDocument) {
		t.Fatalf("http issuer: err = %v", err)
	}
	noFurther(t, e)
}

func TestPA_3_2_01_OneCompanyPerIssuer(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Domains: []string{"example.test", "example-uk.test"}}, nil)
	s1, err := e.company("example.test").Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := e.company("example-uk.test").Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	// PA-3.2-01: the same User ID and the same Session.
	if s1.UserID() != s2.UserID() || s1.ID() != s2.ID() {
		t.Fatalf("User IDs %q %q, Sessions %q %q", s1.UserID(), s2.UserID(), s1.ID(), s2.ID())
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)); n != 1 {
		t.Fatalf("%d token requests, want 1", n)
	}
}

func TestPA_3_2_02_MetadataPathInserted(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{Issuer: "https://auth.example.test/t1"}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	meta := sdkRequests(e.srv, poppytest.EndpointMetadata)
	// PA-3.2-02
	if len(meta) != 1 || meta[0].URL != "https://auth.example.test/.well-known/oauth-authorization-server/t1" {
		t.Fatalf("metadata requests %v", meta)
	}
}

func TestPA_3_2_03_IssuerExactMatch(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{Misconfig: poppytest.Misconfig{MetadataIssuer: "https://auth.example.test/"}}, "example.test")
	// PA-3.2-03
	if !errors.Is(err, poppy.ErrIssuerMismatch) {
		t.Fatalf("err = %v", err)
	}
	noFurther(t, e, poppytest.EndpointToken)
}

func TestPA_3_2_04_PoppyDomains(t *testing.T) {
	e, _, err := discover(t, &poppytest.Options{Misconfig: poppytest.Misconfig{PoppyDomains: []string{"other.test"}}}, "example.test")
	// PA-3.2-04
	if !errors.Is(err, poppy.ErrDomainNotListed) {
		t.Fatalf("err = %v", err)
	}
	noFurther(t, e, poppytest.EndpointToken)
}

func TestPA_3_2_05_RequiredEndpoints(t *testing.T) {
	for _, f := range []string{"revocation_endpoint", "token_endpoint"} {
		_, _, err := discover(t, &poppytest.Options{Misconfig: poppytest.Misconfig{OmitMetadata: []string{f}}}, "example.test")
		// PA-3.2-05
		if !errors.Is(err, poppy.ErrInvalidMetadata) {
			t.Fatalf("without %s: err = %v", f, err)
		}
	}
}

func TestPA_3_2_06_SignInTypeNeedsEndpoint(t *testing.T) {
	_, c, err := discover(t, &poppytest.Options{Misconfig: poppytest.Misconfig{OmitMetadata: []string{"authorization_endpoint"}}}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	// PA-3.2-06
	if got := c.SignInTypes(); slices.Contains(got, "direct") || !slices.Contains(got, "device") {
		t.Fatalf("sign-in types %v", got)
	}
	_, c, _ = discover(t, nil, "example.test")
	if got := c.SignInTypes(); !slices.Equal(got, []string{"direct", "device", "mediated"}) {
		t.Fatalf("sign-in types %v", got)
	}
}

func TestPA_3_2_07_UnknownMetadataFields(t *testing.T) {
	// The fake's metadata always carries x_vendor and poppy_future (CO-3.2-06).
	_, c, err := discover(t, nil, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	// PA-3.2-07
	if _, err := c.Session(ctx, "alice", nil); err != nil {
		t.Fatal(err)
	}
}

func TestPA_3_2_08_MetadataCached(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{MetadataCacheControl: "max-age=600", PoppyCacheControl: "no-cache"}}, nil)
	count := func() int { return len(sdkRequests(e.srv, poppytest.EndpointMetadata)) }
	e.company("example.test")
	e.srv.Clock().Advance(60 * time.Second)
	e.company("example.test")
	// PA-3.2-08
	if n := count(); n != 1 {
		t.Fatalf("%d metadata GETs at t=60s, want 1", n)
	}
	e.srv.Clock().Advance(541 * time.Second)
	e.company("example.test")
	if n := count(); n != 2 {
		t.Fatalf("%d metadata GETs at t=601s, want 2", n)
	}
}

func TestCachedCompanyNeedsNoRequest(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.company("example.test")
	n := len(e.srv.Requests())
	for range 100 {
		e.company("example.test")
	}
	if len(e.srv.Requests()) != n {
		t.Fatalf("resolving a cached Company sent %d requests", len(e.srv.Requests())-n)
	}
}

func TestPA_3_3_02_and_04_UnsupportedExtensionsIgnored(t *testing.T) {
	e, c, err := discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{Extensions: map[string]any{
		"example.test/gift-wrap": map[string]any{"version": "2"},
		"operations":             map[string]any{"version": "9", "endpoint": "https://api.example.test/poppy/operations"},
	}}}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	// PA-3.3-02: a version the SDK doesn't implement is as if absent.
	if _, ok := c.Extension("example.test/gift-wrap", "1"); ok {
		t.Fatal("gift-wrap v2 treated as v1")
	}
	if _, ok := c.Extension("operations", "1"); ok {
		t.Fatal("operations v9 treated as v1")
	}
	// PA-3.3-04: everything else works.
	s, err := c.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// a numeric version is read as its string.
	_, c, err = discover(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{
		"extensions": map[string]any{"example.test/gift-wrap": map[string]any{"version": 1}},
	}}}, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Extension("example.test/gift-wrap", "1"); !ok {
		t.Fatal("numeric version 1 not accepted")
	}
}

func TestPA_3_3_05_NoiseEverywhere(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Noise: true}, nil)
	// PA-3.3-05: an unknown member in every JSON object the fake returns
	// (poppy.json, even inside custom_scopes and extensions; the metadata;
	// token responses; API bodies) changes nothing.
	s := e.session("alice")
	if code, body := e.get(s, "/products"); code != 200 || !strings.Contains(body, "x_unknown") {
		t.Fatalf("status %d %s", code, body)
	}
	if d, ok := e.company("example.test").ScopeDescription("addresses"); !ok || d == "" {
		t.Fatal("a known custom scope was lost among unknown members")
	}
}

// A 429 on a discovery document is waited out too (spec 4.3: any endpoint).
func TestDiscoveryRateLimited(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.Faults().RateLimit(poppytest.EndpointPoppyJSON, 1, "3")
	e.company("example.test")
	docs := sdkRequests(e.srv, poppytest.EndpointPoppyJSON)
	// PA-4.3-27
	if len(docs) != 2 || docs[0].Status != 429 || docs[1].Time.Sub(docs[0].Time) < 3*time.Second {
		t.Fatalf("%d requests", len(docs))
	}
}

// Every document the SDK reads is capped.
func TestResponseSizeCapped(t *testing.T) {
	e := newEnv(t, nil, &poppy.AgentOptions{MaxResponseBytes: 64})
	if _, err := e.agent.Company(ctx, "example.test"); !errors.Is(err, poppy.ErrResponseTooLarge) {
		t.Fatalf("err = %v, want ErrResponseTooLarge", err)
	}
}

// UnsafeAllowLoopbackHTTP lets the SDK talk plain HTTP to a Company on a
// loopback address, and to nothing else.
func TestUnsafeAllowLoopbackHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"protocol_version":"0.1","organization":{"name":"Dev","domain":"127.0.0.1"},"web":{}}`)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	key, _ := poppy.GenerateSigningKey()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "http://127.0.0.1:1/agent.json", Keys: []*poppy.SigningKey{key}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := poppy.NewAgent(id, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := dev.Company(ctx, host)
	if err != nil {
		t.Fatalf("loopback http Company: %v", err)
	}
	if c.Name() != "Dev" {
		t.Fatalf("name %q", c.Name())
	}
	// Never a non-loopback host, option or not.
	if _, err := dev.Company(ctx, "http://example.test"); !errors.Is(err, poppy.ErrInsecureURL) {
		t.Fatalf("non-loopback http: %v", err)
	}
	// Off by default: the same loopback Company is refused.
	e := newEnv(t, nil, nil)
	if _, err := e.agent.Company(ctx, "http://"+host); !errors.Is(err, poppy.ErrInsecureURL) {
		t.Fatalf("without the option: %v", err)
	}
}
