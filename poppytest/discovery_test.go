package poppytest_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

func TestCO_3_01_PoppyJSONOnlyOverHTTPS(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	r := get(t, srv, srv.URL()+"/.well-known/poppy.json")
	// CO-3-01
	if r.Status != http.StatusOK || r.Body["protocol_version"] != "0.1" {
		t.Fatalf("GET poppy.json = %d %s", r.Status, r.Raw)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	reqs := srv.RequestsTo(poppytest.EndpointPoppyJSON)
	if len(reqs) != 1 || reqs[0].URL != "https://example.test/.well-known/poppy.json" || reqs[0].Method != "GET" {
		t.Fatalf("logged %+v", reqs)
	}
	// CO-3-01: plain HTTP never gets the document.
	p := get(t, srv, "http://example.test/.well-known/poppy.json")
	if p.Status == http.StatusOK || strings.Contains(string(p.Raw), "protocol_version") {
		t.Fatalf("plain HTTP got %d %s", p.Status, p.Raw)
	}
	wantRules(t, srv, pa("3-01"))
	// The www. twin serves the same document.
	w := get(t, srv, "https://www.example.test/.well-known/poppy.json")
	if org := w.Body["organization"].(map[string]any); org["domain"] != "example.test" {
		t.Errorf("www organization = %v", org)
	}
}

func TestClientDialsOnlyFakeHosts(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	_, err := srv.Client().Get("https://elsewhere.test/")
	if err == nil || !strings.Contains(err.Error(), "not served by the fake") {
		t.Fatalf("unknown host: err = %v", err)
	}
	if tr := srv.Transport(); tr.TLSClientConfig.InsecureSkipVerify || tr.TLSClientConfig.RootCAs == nil {
		t.Fatal("transport must trust the CA through RootCAs")
	}
	// A plain client without the CA does not trust the fake.
	c := &http.Client{Transport: &http.Transport{DialContext: srv.Transport().DialContext}}
	if _, err := c.Get(srv.URL() + "/.well-known/poppy.json"); err == nil {
		t.Fatal("a client without the fake's CA trusted its certificate")
	}
}

func TestDocumentShapeAndCaching(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	r := get(t, srv, srv.URL()+"/.well-known/poppy.json")
	var doc struct {
		ProtocolVersion string `json:"protocol_version"`
		Organization    struct{ Name, Domain string }
		Auth            struct {
			Issuer   string
			Direct   struct{ Scopes []string }
			Device   struct{ Scopes []string }
			Mediated struct {
				Endpoint string
				Fields   []struct {
					Name, Label string
					Secret      bool
				}
				Scopes []string
			}
			CustomScopes map[string]string `json:"custom_scopes"`
		}
		Agent struct {
			Protocols []struct{ Type, Endpoint string }
		}
		Web struct {
			BrowserSessionEndpoint string `json:"browser_session_endpoint"`
		}
		APIs       []struct{ Type, URL, Description, Resource string }
		Extensions map[string]struct{ Version, Endpoint string }
	}
	if err := json.Unmarshal(r.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	// CO-3-04
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+$`).MatchString(doc.ProtocolVersion) {
		t.Errorf("protocol_version %q", doc.ProtocolVersion)
	}
	// CO-3-05, CO-3-06
	if doc.Organization.Name == "" || doc.Organization.Domain != "example.test" {
		t.Errorf("organization = %+v", doc.Organization)
	}
	// CO-3-07
	if doc.Auth.Issuer != "https://auth.example.test" || srv.Issuer() != doc.Auth.Issuer {
		t.Errorf("issuer = %q", doc.Auth.Issuer)
	}
	// CO-3-11, CO-4.4-03
	if !slices.Equal(doc.Auth.Direct.Scopes, []string{"poppy:read", "poppy:write", "addresses"}) ||
		!slices.Equal(doc.Auth.Device.Scopes, []string{"poppy:read", "poppy:write"}) ||
		doc.Auth.Mediated.Endpoint != "https://auth.example.test/poppy/sign-in" ||
		len(doc.Auth.Mediated.Fields) != 2 || !doc.Auth.Mediated.Fields[1].Secret ||
		doc.Auth.CustomScopes["addresses"] == "" {
		t.Errorf("auth = %+v", doc.Auth)
	}
	// CO-3-09
	if len(doc.Agent.Protocols) != 1 || doc.Agent.Protocols[0].Type != "poppy" ||
		doc.Agent.Protocols[0].Endpoint != "https://api.example.test/poppy/conversations" {
		t.Errorf("agent = %+v", doc.Agent)
	}
	// CO-3-10, CO-6-01
	if len(doc.APIs) != 2 || doc.APIs[0].Type != "openapi" || doc.APIs[0].URL != "https://api.example.test/openapi.json" ||
		doc.APIs[1].Type != "mcp" || doc.APIs[1].URL != "https://mcp.example.test/mcp" || doc.APIs[0].Description == "" {
		t.Errorf("apis = %+v", doc.APIs)
	}
	if doc.Web.BrowserSessionEndpoint != "https://example.test/poppy/browser-session" {
		t.Errorf("web = %+v", doc.Web)
	}
	// CO-3.3-01
	if doc.Extensions["operations"].Version != "1" {
		t.Errorf("extensions = %+v", doc.Extensions)
	}
	// HTTP caching: Cache-Control, ETag and 304.
	if cc := r.Header.Get("Cache-Control"); cc != "max-age=300" {
		t.Errorf("Cache-Control = %q", cc)
	}
	etag := r.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	nm := get(t, srv, srv.URL()+"/.well-known/poppy.json", "If-None-Match", etag)
	if nm.Status != http.StatusNotModified || len(nm.Raw) != 0 {
		t.Errorf("If-None-Match: %d %q", nm.Status, nm.Raw)
	}
	if d, err := http.ParseTime(r.Header.Get("Date")); err != nil || !within(d, srv.Clock().Now(), 2e9) {
		t.Errorf("Date %q is not Clock time", r.Header.Get("Date"))
	}
}

func TestCO_3_02_RedirectToProvider(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"https://provider.test/example/poppy.json"}},
	})
	// Follow by hand to see each hop.
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest("GET", "https://example.test/.well-known/poppy.json", nil)
	hop := do(t, &c, req)
	// CO-3-02
	if hop.Status != http.StatusPermanentRedirect || hop.Header.Get("Location") != "https://provider.test/example/poppy.json" {
		t.Fatalf("hop = %d %v", hop.Status, hop.Header)
	}
	r := get(t, srv, "https://example.test/.well-known/poppy.json")
	if r.Status != 200 || r.Body["organization"].(map[string]any)["domain"] != "example.test" {
		t.Fatalf("document = %d %s", r.Status, r.Raw)
	}
	var urls []string
	for _, q := range srv.Requests() {
		urls = append(urls, q.URL)
	}
	want := []string{"https://example.test/.well-known/poppy.json", "https://example.test/.well-known/poppy.json", "https://provider.test/example/poppy.json"}
	if !slices.Equal(urls, want) {
		t.Errorf("requests = %v", urls)
	}
	if eps := srv.RequestsTo(poppytest.EndpointProvider); len(eps) != 1 {
		t.Errorf("provider requests = %d", len(eps))
	}
}

func TestRedirectChainStatuses(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"https://provider.test/a", "https://provider.test/example/poppy.json"}},
		Misconfig: poppytest.Misconfig{ProviderDomain: "provider.test"},
	})
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var statuses []int
	u := "https://example.test/.well-known/poppy.json"
	for range 3 {
		req, _ := http.NewRequest("GET", u, nil)
		r := do(t, &c, req)
		statuses = append(statuses, r.Status)
		u = r.Header.Get("Location")
		if r.Status == 200 {
			if d := r.Body["organization"].(map[string]any)["domain"]; d != "provider.test" {
				t.Errorf("ProviderDomain: domain = %v", d)
			}
		}
	}
	if !slices.Equal(statuses, []int{301, 307, 200}) {
		t.Errorf("statuses = %v", statuses)
	}
}

func TestCO_3_03_NonHTTPSRedirectRejected(t *testing.T) {
	// CO-3-03
	msg := configError(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"http://provider.test/poppy.json"}}})
	if !strings.Contains(msg, "CO-3-03") {
		t.Fatalf("NewServer accepted an http redirect target: %q", msg)
	}
	srv := poppytest.NewServer(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{RedirectWellKnown: []string{"http://provider.test/poppy.json"}}, Misconfig: poppytest.Misconfig{InsecureRedirect: true},
	})
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest("GET", srv.URL()+"/.well-known/poppy.json", nil)
	if r := do(t, &c, req); r.Header.Get("Location") != "http://provider.test/poppy.json" {
		t.Fatalf("Location = %q", r.Header.Get("Location"))
	}
	if r := get(t, srv, "http://provider.test/poppy.json"); r.Status != 200 {
		t.Fatalf("negative mode serves the insecure hop: %d", r.Status)
	}
	wantRules(t, srv, pa("3-03"))
}

func TestCO_3_ConfigurationValidator(t *testing.T) {
	cases := []struct {
		name string
		opts poppytest.Options
		rule string
	}{
		// CO-4.2-06
		{"negative TTL", poppytest.Options{Tokens: poppytest.TokenPolicy{TTL: -1}}, "CO-4.2-06"},
		// CO-4.4-04
		{"poppy: custom scope", poppytest.Options{SignIn: poppytest.SignInPolicy{CustomScopes: map[string]string{"poppy:admin": "Admin"}}}, "CO-4.4-04"},
		// CO-3.3-01
		{"plain extension name", poppytest.Options{Discovery: poppytest.DiscoveryOptions{Extensions: map[string]any{"gift-wrap": map[string]any{"version": "1"}}}}, "CO-3.3-01"},
		// CO-3.3-01
		{"extension without version", poppytest.Options{Discovery: poppytest.DiscoveryOptions{Extensions: map[string]any{"example.test/gift-wrap": map[string]any{}}}}, "CO-3.3-01"},
		// CO-3-07
		{"http issuer", poppytest.Options{Issuer: "http://auth.example.test"}, "CO-3-07"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := configError(t, &c.opts)
			if !strings.Contains(msg, c.rule) {
				t.Fatalf("NewServer error %q does not name %s", msg, c.rule)
			}
		})
	}
	// Valid variations start.
	for _, o := range []poppytest.Options{
		{Discovery: poppytest.DiscoveryOptions{Extensions: map[string]any{"example.test/gift-wrap": map[string]any{"version": "1"}, "operations": map[string]any{"version": "9"}}}},
		{Discovery: poppytest.DiscoveryOptions{DropAuth: true, DropAgent: true, DropAPIs: true, DropBrowserSession: true}},
		{SignIn: poppytest.SignInPolicy{Disable: []string{"direct", "device", "mediated"}}},
		{Issuer: "https://auth.example.test/t1"},
		{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"x_future": map[string]any{"a": 1}}, ProtocolVersion: "0.9"}},
		{Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "1.0"}},
	} {
		if msg := configError(t, &o); msg != "" {
			t.Errorf("valid options %+v refused: %s", o, msg)
		}
	}
}

func TestNegativeDiscoveryOptions(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{ProtocolVersion: "0"},
		Misconfig: poppytest.Misconfig{
			OrganizationDomain: "other.test", IssuerInDocument: "http://auth.example.test",
			MetadataIssuer: "https://auth.example.test/", PoppyDomains: []string{"else.test"},
			OmitMetadata: []string{"revocation_endpoint", "authorization_endpoint"},
		},
	})
	d := get(t, srv, srv.URL()+"/.well-known/poppy.json").Body
	if d["protocol_version"] != "0" || d["organization"].(map[string]any)["domain"] != "other.test" ||
		d["auth"].(map[string]any)["issuer"] != "http://auth.example.test" {
		t.Errorf("document = %v", d)
	}
	m := get(t, srv, "https://auth.example.test/.well-known/oauth-authorization-server").Body
	if m["issuer"] != "https://auth.example.test/" || m["revocation_endpoint"] != nil || m["authorization_endpoint"] != nil ||
		m["poppy_domains"].([]any)[0] != "else.test" {
		t.Errorf("metadata = %v", m)
	}
	drop := poppytest.NewServer(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DropAuth: true}, Misconfig: poppytest.Misconfig{DropOrganization: true}})
	d = get(t, drop, drop.URL()+"/.well-known/poppy.json").Body
	if d["organization"] != nil || d["auth"] != nil || d["apis"] == nil {
		t.Errorf("dropped document = %v", d)
	}
}

func TestCO_3_13_APIResourceInDocument(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/orders-api"}})
	apis := get(t, srv, srv.URL()+"/.well-known/poppy.json").Body["apis"].([]any)
	// CO-3-13
	if apis[0].(map[string]any)["resource"] != "https://api.example.test/orders-api" {
		t.Fatalf("apis = %v", apis)
	}
}

func TestCO_3_2_Metadata(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Domains: []string{"example.test", "example-uk.test"}})
	r := get(t, srv, "https://auth.example.test/.well-known/oauth-authorization-server")
	m := r.Body
	// CO-3.2-02
	if r.Status != 200 || m["issuer"] != srv.Issuer() {
		t.Fatalf("metadata = %d %s", r.Status, r.Raw)
	}
	// CO-3.2-03
	if d := m["poppy_domains"].([]any); len(d) != 2 || d[0] != "example.test" || d[1] != "example-uk.test" {
		t.Errorf("poppy_domains = %v", d)
	}
	// CO-3.2-04
	if m["token_endpoint"] != "https://auth.example.test/oauth/token" || m["revocation_endpoint"] != "https://auth.example.test/oauth/revoke" {
		t.Errorf("endpoints = %v %v", m["token_endpoint"], m["revocation_endpoint"])
	}
	// CO-3.2-05
	if m["authorization_endpoint"] != "https://auth.example.test/oauth/authorize" || m["device_authorization_endpoint"] != "https://auth.example.test/oauth/device" {
		t.Errorf("sign-in endpoints = %v", m)
	}
	// CO-3.2-06
	if _, ok := m["x_vendor"].(map[string]any); !ok || m["poppy_future"] != float64(5) {
		t.Errorf("extra members = %v %v", m["x_vendor"], m["poppy_future"])
	}
	if dpop := m["dpop_signing_alg_values_supported"].([]any); len(dpop) != 1 || dpop[0] != "ES256" {
		t.Errorf("dpop algs = %v", dpop)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "max-age=600" || r.Header.Get("ETag") == "" {
		t.Errorf("metadata caching headers = %v", r.Header)
	}
	// CO-3.2-01: both domains name one issuer.
	uk := get(t, srv, "https://example-uk.test/.well-known/poppy.json").Body
	if uk["auth"].(map[string]any)["issuer"] != srv.Issuer() || uk["organization"].(map[string]any)["domain"] != "example-uk.test" {
		t.Errorf("example-uk.test document = %v", uk)
	}
}

func TestMetadataPathInsertedForIssuerPath(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Issuer: "https://auth.example.test/t1"})
	r := get(t, srv, "https://auth.example.test/.well-known/oauth-authorization-server/t1")
	if r.Status != 200 || r.Body["issuer"] != "https://auth.example.test/t1" || r.Body["token_endpoint"] != "https://auth.example.test/t1/oauth/token" {
		t.Fatalf("metadata = %d %s", r.Status, r.Raw)
	}
	if r := get(t, srv, "https://auth.example.test/.well-known/oauth-authorization-server"); r.Status != 404 {
		t.Errorf("root metadata for a path issuer: %d", r.Status)
	}
	// The token endpoint works at the path.
	a := newAgent(t, srv, "agent.test")
	if r := a.token(a.startForm("usr_1")); r.Status != 200 {
		t.Fatalf("start at path issuer: %d %s", r.Status, r.Raw)
	}
}

func TestNoiseEverywhere(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Noise: true})
	doc := get(t, srv, srv.URL()+"/.well-known/poppy.json").Body
	if doc["x_unknown"] == nil || doc["organization"].(map[string]any)["x_unknown"] == nil {
		t.Errorf("poppy.json without noise: %v", doc)
	}
	if m := get(t, srv, "https://auth.example.test/.well-known/oauth-authorization-server").Body; m["x_unknown"] == nil {
		t.Error("metadata without noise")
	}
	a := newAgent(t, srv, "agent.test")
	r := a.start("usr_1")
	if r.Body["x_unknown"] == nil {
		t.Errorf("token response without noise: %s", r.Raw)
	}
	if e := a.call("GET", "/orders", r.str("access_token"), ""); e.Body["x_unknown"] == nil {
		t.Errorf("error without noise: %s", e.Raw)
	}
	if e := a.call("POST", "/echo", r.str("access_token"), `{"a":1}`); string(e.Raw) != `{"a":1}` {
		t.Errorf("echo got noise: %s", e.Raw)
	}
}
