package poppytest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// servedDoc is a static JSON document with its ETag.
type servedDoc struct {
	body []byte
	etag string
}

func newServedDoc(v any, noise bool) (*servedDoc, error) {
	if noise {
		v = addNoise(v)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return &servedDoc{body: b, etag: `"` + b64.EncodeToString(sum[:12]) + `"`}, nil
}

// chainHop is one URL of the RedirectWellKnown chain.
type chainHop struct {
	scheme, host, path string
	url                string
}

func (s *Server) configureChain() error {
	o := &s.opts
	for _, raw := range o.Discovery.RedirectWellKnown {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.Port() != "" || (u.Scheme != "https" && u.Scheme != "http") {
			return fmt.Errorf("poppytest: Discovery.RedirectWellKnown target %q must be an absolute URL without port", raw)
		}
		if u.Scheme != "https" && !o.Misconfig.InsecureRedirect {
			// CO-3-03: every redirect of the well-known URL is to HTTPS.
			return fmt.Errorf("poppytest: Discovery.RedirectWellKnown target %q is not https: every redirect MUST be to an HTTPS URL (CO-3-03); set Misconfig.InsecureRedirect for a negative test", raw)
		}
		p := u.EscapedPath()
		if p == "" {
			p = "/"
		}
		host := canonicalHost(u.Host)
		s.chain = append(s.chain, chainHop{scheme: u.Scheme, host: host, path: p, url: u.Scheme + "://" + host + p})
		s.hosts[host] = true
	}
	if len(o.Discovery.RedirectStatuses) == 0 {
		if len(s.chain) == 1 {
			o.Discovery.RedirectStatuses = []int{http.StatusPermanentRedirect}
		} else {
			o.Discovery.RedirectStatuses = []int{http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}
		}
	}
	for _, st := range o.Discovery.RedirectStatuses {
		if st < 300 || st > 399 {
			return fmt.Errorf("poppytest: Discovery.RedirectStatuses: %d is not a redirect status", st)
		}
	}
	return nil
}

// chainIndex returns the position of a URL in the redirect chain, or -1.
func (s *Server) chainIndex(scheme, host, path string) int {
	for i, h := range s.chain {
		if h.scheme == scheme && h.host == host && h.path == path {
			return i
		}
	}
	return -1
}

func (s *Server) redirectStatus(hop int) int {
	return s.opts.Discovery.RedirectStatuses[hop%len(s.opts.Discovery.RedirectStatuses)]
}

// document builds the poppy.json served for domain (spec 3).
func (s *Server) document(domain string) map[string]any {
	o := &s.opts
	api := s.apiURL()
	doc := map[string]any{
		"protocol_version": "0.1",
		"organization":     map[string]any{"name": "Example Company", "domain": domain},
	}
	if o.Discovery.ProtocolVersion != "" {
		doc["protocol_version"] = o.Discovery.ProtocolVersion
	}
	if o.Misconfig.OrganizationDomain != "" {
		doc["organization"].(map[string]any)["domain"] = o.Misconfig.OrganizationDomain
	}
	if o.Misconfig.DropOrganization {
		delete(doc, "organization")
	}
	if !o.Discovery.DropAuth {
		issuer := s.issuer
		if o.Misconfig.IssuerInDocument != "" {
			issuer = o.Misconfig.IssuerInDocument
		}
		auth := map[string]any{"issuer": issuer}
		if s.signInOffered("direct") {
			auth["direct"] = map[string]any{"scopes": slices.Clone(s.signin.scopes["direct"])}
		}
		if s.signInOffered("device") {
			auth["device"] = map[string]any{"scopes": slices.Clone(s.signin.scopes["device"])}
		}
		if s.signInOffered("mediated") {
			fields := make([]any, 0, len(o.SignIn.MediatedFields))
			for _, f := range o.SignIn.MediatedFields {
				fields = append(fields, map[string]any{"name": f.Name, "label": f.Label, "secret": f.Secret})
			}
			auth["mediated"] = map[string]any{
				"endpoint": s.mediatedEndpoint(),
				"fields":   fields,
				"scopes":   slices.Clone(s.signin.scopes["mediated"]),
			}
		}
		if len(o.SignIn.CustomScopes) > 0 {
			cs := map[string]any{}
			for k, v := range o.SignIn.CustomScopes {
				cs[k] = v
			}
			auth["custom_scopes"] = cs
		}
		doc["auth"] = auth
	}
	if !o.Discovery.DropAgent {
		entry := map[string]any{"type": "poppy", "endpoint": api + "/poppy/conversations"}
		if o.Conversations.Resource != "" {
			entry["resource"] = o.Conversations.Resource // CO-3-12
		}
		doc["agent"] = map[string]any{"protocols": []any{entry}}
	}
	if !o.Discovery.DropWeb {
		web := map[string]any{}
		if !o.Discovery.DropBrowserSession {
			web["browser_session_endpoint"] = "https://" + domain + "/poppy/browser-session"
		}
		doc["web"] = web
	}
	if !o.Discovery.DropAPIs {
		openapi := map[string]any{"type": "openapi", "url": api + "/openapi.json", "description": "Orders, returns, and exchanges"}
		if o.API.Resource != "" {
			openapi["resource"] = o.API.Resource
		}
		apis := []any{openapi, map[string]any{"type": "mcp", "url": s.mcpURL(), "description": "Product search and sizing"}}
		if o.MCP.SecondServer {
			apis = append(apis, map[string]any{"type": "mcp", "url": s.mcp2URL(), "description": "Product search and sizing, second server"})
		}
		doc["apis"] = apis
	}
	opsEntry := map[string]any{"version": "1", "endpoint": api + "/poppy/operations"}
	if o.Operations.Resource != "" {
		opsEntry["resource"] = o.Operations.Resource // CO-OPS2-02
	}
	ext := map[string]any{"operations": opsEntry}
	for k, v := range o.Discovery.Extensions {
		if v == nil {
			delete(ext, k)
		} else {
			ext[k] = v
		}
	}
	if len(ext) > 0 {
		doc["extensions"] = ext
	}
	for k, v := range o.Discovery.DocumentFields {
		doc[k] = v
	}
	return doc
}

// knownDocumentMembers are the top-level members the protocol defines.
var knownDocumentMembers = []string{"protocol_version", "organization", "auth", "agent", "web", "apis", "extensions"}

// metadataDoc builds the RFC 8414 metadata (spec 3.2).
func (s *Server) metadataDoc() map[string]any {
	o := &s.opts
	issuer := s.issuer
	if o.Misconfig.MetadataIssuer != "" {
		issuer = o.Misconfig.MetadataIssuer
	}
	domains := slices.Clone(o.Domains)
	if o.Misconfig.PoppyDomains != nil {
		domains = slices.Clone(o.Misconfig.PoppyDomains)
	}
	m := map[string]any{
		"issuer":                                           issuer,
		"token_endpoint":                                   s.tokenEndpoint(),
		"revocation_endpoint":                              s.revocationEndpoint(),
		"authorization_endpoint":                           s.authBase + "/oauth/authorize",
		"device_authorization_endpoint":                    s.authBase + "/oauth/device",
		"poppy_domains":                                    domains,
		"dpop_signing_alg_values_supported":                []string{"ES256"},
		"grant_types_supported":                            []string{grantJWTBearer, "refresh_token", "authorization_code", "urn:ietf:params:oauth:grant-type:device_code"},
		"response_types_supported":                         []string{"code"},
		"code_challenge_methods_supported":                 []string{"S256"},
		"token_endpoint_auth_methods_supported":            []string{"private_key_jwt"},
		"token_endpoint_auth_signing_alg_values_supported": []string{"ES256", "ES384", "RS256", "PS256", "EdDSA"},
		"revocation_endpoint_auth_methods_supported":       []string{"private_key_jwt"},
		"authorization_response_iss_parameter_supported":   true,
		"scopes_supported":                                 s.allScopes(),
		"x_vendor":                                         map[string]any{"name": "poppytest", "features": []string{"noise-free"}},
		"poppy_future":                                     5,
	}
	for _, k := range o.Misconfig.OmitMetadata {
		delete(m, k)
	}
	return m
}

// allScopes returns every scope the Company defines: the protocol scopes
// (unless NarrowScopesOnly) and then the custom ones, sorted.
func (s *Server) allScopes() []string {
	return slices.Clone(s.signin.known)
}

// metadataPath is the RFC 8414 location for an issuer on the auth host
// (path inserted after the well-known prefix, trailing slash removed).
func metadataPath(issuer string) (host, path string, ok bool) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return "", "", false
	}
	return canonicalHost(u.Host), "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.EscapedPath(), "/"), true
}

// buildDiscovery builds and validates every document the fake serves.
func (s *Server) buildDiscovery() error {
	o := &s.opts
	s.docs = map[string]*servedDoc{}
	meta := s.metadataDoc()
	allowed := s.allowedBreaks()
	var problems []problem
	docs := map[string]map[string]any{}
	for _, d := range o.Domains {
		doc := s.document(d)
		docs[d] = doc
		if !s.documentOverridden() {
			problems = append(problems, validateDocument(doc, d)...)
		}
		sd, err := newServedDoc(doc, o.Noise)
		if err != nil {
			return err
		}
		s.docs[d] = sd
	}
	if len(s.chain) > 0 {
		doc := s.document(s.primary)
		if org, ok := doc["organization"].(map[string]any); ok && o.Misconfig.ProviderDomain != "" {
			org["domain"] = o.Misconfig.ProviderDomain
		}
		if !s.documentOverridden() {
			problems = append(problems, validateDocument(doc, s.primary)...)
		}
		sd, err := newServedDoc(doc, o.Noise)
		if err != nil {
			return err
		}
		s.chainDoc = sd
	}
	problems = append(problems, validateMetadata(meta, docs)...)
	var msgs []string
	for _, p := range problems {
		if !allowed[p.rule] {
			msgs = append(msgs, p.String())
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("poppytest: the configured discovery documents break Company rules:\n\t%s", strings.Join(msgs, "\n\t"))
	}
	md, err := newServedDoc(meta, o.Noise)
	if err != nil {
		return err
	}
	s.metadata = md
	s.metaPaths = map[string]bool{}
	for _, iss := range []string{s.issuer, o.Misconfig.MetadataIssuer, o.Misconfig.IssuerInDocument} {
		if h, p, ok := metadataPath(iss); ok && h == s.authHost {
			s.metaPaths[p] = true
		}
	}
	return nil
}

func (s *Server) documentOverridden() bool {
	for k := range s.opts.Discovery.DocumentFields {
		if slices.Contains(knownDocumentMembers, k) {
			return true
		}
	}
	return false
}

// allowedBreaks lists the rules the negative options deliberately break.
func (s *Server) allowedBreaks() map[string]bool {
	o := &s.opts
	a := map[string]bool{}
	if o.Discovery.ProtocolVersion != "" {
		a["CO-3-04"] = true
	}
	if o.Misconfig.OrganizationDomain != "" || o.Misconfig.ProviderDomain != "" {
		a["CO-3-06"] = true
	}
	if o.Misconfig.DropOrganization {
		a["CO-3-05"], a["CO-3-06"] = true, true
	}
	if o.Discovery.DropAuth || o.Misconfig.IssuerInDocument != "" {
		a["CO-3-07"] = true
	}
	if o.Misconfig.PoppyDomains != nil || o.Misconfig.MetadataIssuer != "" || o.Misconfig.IssuerInDocument != "" {
		a["CO-3.2-03"] = true
	}
	if len(o.Misconfig.OmitMetadata) > 0 {
		a["CO-3.2-04"], a["CO-3.2-05"] = true, true
	}
	return a
}

// servePoppyJSON serves GET https://{domain}/.well-known/poppy.json.
func (s *Server) servePoppyJSON(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	domain := s.domainOf(x.host)
	if len(s.chain) > 0 && domain == s.primary {
		x.errorCode = ""
		w.Header().Set("Location", s.chain[0].url)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(s.redirectStatus(0))
		return
	}
	s.serveStatic(w, r, s.docs[domain], s.opts.Discovery.PoppyCacheControl)
}

// serveChain serves one hop of the redirect chain: a redirect to the next
// hop, or the document at the last one.
func (s *Server) serveChain(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	i := s.chainIndex(x.scheme, x.host, r.URL.Path)
	if i < len(s.chain)-1 {
		w.Header().Set("Location", s.chain[i+1].url)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(s.redirectStatus(i + 1))
		return
	}
	s.serveStatic(w, r, s.chainDoc, s.opts.Discovery.PoppyCacheControl)
}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	s.serveStatic(w, r, s.metadata, s.opts.Discovery.MetadataCacheControl)
}

// serveStatic serves a document with Cache-Control and ETag, answering a
// matching If-None-Match with 304.
func (s *Server) serveStatic(w http.ResponseWriter, r *http.Request, d *servedDoc, cacheControl string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		exchangeOf(r).errorCode = "method_not_allowed"
		w.Header().Set("Allow", "GET, HEAD")
		s.writeJSON(w, r, http.StatusMethodNotAllowed, map[string]any{"error": "method_not_allowed"})
		return
	}
	h := w.Header()
	h.Set("Cache-Control", cacheControl)
	h.Set("ETag", d.etag)
	h.Set("Vary", "Accept-Encoding")
	if etagMatches(r.Header.Get("If-None-Match"), d.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", fmt.Sprint(len(d.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(d.body)
	}
}

// etagMatches implements the weak comparison of If-None-Match (RFC 9110
// 13.1.2).
func etagMatches(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// addNoise returns a copy of v (a JSON-shaped value) with an "x_unknown"
// member in every object (PA-3.3-05).
func addNoise(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t)+1)
		for k, e := range t {
			out[k] = addNoise(e)
		}
		if _, ok := out["x_unknown"]; !ok {
			out["x_unknown"] = map[string]any{"poppytest": "noise", "list": []any{1, "two", nil, true}}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = addNoise(e)
		}
		return out
	default:
		// Normalise typed values (structs, typed slices) through JSON.
		b, err := json.Marshal(v)
		if err != nil {
			return v
		}
		var g any
		if err := json.Unmarshal(b, &g); err != nil {
			return v
		}
		switch g.(type) {
		case map[string]any, []any:
			return addNoise(g)
		}
		return v
	}
}
