package poppytest

// The MCP server on https://mcp.{primary}/mcp (spec 4.3, 6).
//
// It speaks MCP's Streamable HTTP transport itself (MCP 2025-03-26 to
// 2025-11-25; mcpserver.go), answering each POST with one JSON response,
// behind a Bearer token check: only Bearer Session Tokens from the fake's
// token store that were issued for this server's url (CO-6-06), unexpired
// by the Clock, unrevoked, of a live Session. Scopes are enforced per tool
// before the request reaches the MCP server: a tools/call of a tool that
// needs a signed-in token or scopes the token lacks gets 403 with
// WWW-Authenticate: Bearer error="sign_in_required" or
// error="insufficient_scope", scope="…" (CO-6-05, RFC 6750 3.1). A 401 says
// error="invalid_token" (CO-6-09) next to the resource_metadata.
//
// The fake implements the transport rather than building on an MCP
// library: a program or test that imports poppytest (the root module's
// tests do) then needs no MCP library in its module graph, and the SDK's
// MCP client (package api, on the go-sdk) is tested against another
// implementation than its own.
//
// The protected resource metadata (RFC 9728) is served at the path-inserted
// location https://mcp.{primary}/.well-known/oauth-protected-resource/mcp and
// lists auth.issuer in authorization_servers (CO-6-07), unless
// MCPServingOptions.AuthorizationServers replaces them (negative).
//
// tools/list answers pages of two tools: a client must follow nextCursor.
//
// GET on the endpoint (the optional standalone SSE stream) is answered 405,
// which MCP allows; the fake then holds no hanging stream that would delay
// Close.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

// MCPServingOptions configures how the Company serves MCP: the fake's MCP
// servers and the Bearer tokens it issues for MCP servers (Options.MCP).
type MCPServingOptions struct {
	// AuthorizationServers replaces authorization_servers in the MCP
	// server's protected resource metadata (negative: CO-6-07 when it
	// doesn't list the issuer). Nil means [auth.issuer].
	AuthorizationServers []string
	// SecondServer lists a second MCP server, https://mcp2.{primary}/mcp,
	// in poppy.json, with the same tools. Each accepts only Bearer tokens
	// issued for its own url (CO-6-06).
	SecondServer bool
	// OnAPIHost serves the MCP server at https://api.{primary}/mcp, on the
	// host of the OpenAPI API, instead of mcp.{primary}: only a client that
	// picks the token by URL, not by host, sends a Bearer token to the one
	// and a DPoP token to the other. Either mistake is 401 and a PA-4.3-19
	// violation.
	OnAPIHost bool
	// OtherServers are urls of MCP servers a test serves itself (with
	// HandleAgent on a host of the Company) to try tools the fake doesn't
	// have: the token endpoint issues Bearer tokens for them. List them in
	// poppy.json with Discovery.DocumentFields.
	OtherServers []string
}

// mcpHostName is the host of the (first) MCP server.
func (s *Server) mcpHostName() string {
	if s.opts.MCP.OnAPIHost {
		return s.apiHost
	}
	return s.mcpHost
}

// mcp2URL returns the url of the second MCP server (MCPServingOptions.SecondServer).
func (s *Server) mcp2URL() string { return "https://mcp2." + s.primary + "/mcp" }

// mcpResourceMetadataPath is the RFC 9728 location of the metadata for the
// resource https://{host}/mcp (the well-known segment inserted before the
// path).
const mcpResourceMetadataPath = "/.well-known/oauth-protected-resource/mcp"

// mcpResourceMetadataURL returns where the MCP server's protected resource
// metadata is served.
func (s *Server) mcpResourceMetadataURL() string {
	return "https://" + s.mcpHostName() + mcpResourceMetadataPath
}

// mcpPageSize is how many tools one tools/list page holds.
const mcpPageSize = 2

// mcpTool describes one tool of the fake MCP server and what it needs.
type mcpTool struct {
	signIn bool     // needs a signed-in token
	scopes []string // needs these scopes (implies signIn)
}

// mcpTools are the tools' requirements, by name.
func (s *Server) mcpTools() map[string]mcpTool {
	return map[string]mcpTool{
		"search_products":   {},
		"size_advice":       {},
		"list_orders":       {signIn: true, scopes: []string{s.signin.read}},
		"save_size_profile": {signIn: true, scopes: []string{s.signin.write}},
		"request_exchange":  {signIn: true, scopes: []string{s.signin.read, s.signin.write}},
	}
}

// mcpHandler builds the handler of the MCP server whose url is url: the
// Bearer token check, the per-tool scope check, then the server.
func (s *Server) mcpHandler(url string) http.Handler {
	host := strings.TrimSuffix(strings.TrimPrefix(url, "https://"), "/mcp")
	return s.requireBearer(url, "https://"+host+mcpResourceMetadataPath, s.mcpScopes(s.newMCPServer()))
}

// serveMCP routes the MCP hosts: the endpoint and its resource metadata.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	url := "https://" + x.host + "/mcp"
	switch r.URL.Path {
	case mcpResourceMetadataPath:
		s.serveResourceMetadata(w, r, url)
		return
	case "/mcp":
	default:
		s.notFound(w, r)
		return
	}
	if r.Method == http.MethodGet {
		x.errorCode = "method_not_allowed"
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "poppytest: no standalone SSE stream", http.StatusMethodNotAllowed)
		return
	}
	if len(r.Header.Values("DPoP")) > 0 {
		// PA-6-02: MCP requests carry a Bearer token without a proof.
		s.violate(x.idx, "PA-6-02", "a DPoP proof was sent to the MCP server")
	}
	h := s.mcpHandlers[x.host]
	if h == nil {
		s.notFound(w, r)
		return
	}
	h.ServeHTTP(&bearerChallengeWriter{ResponseWriter: w, x: x}, r)
}

// serveResourceMetadata serves RFC 9728 metadata for the MCP server at url.
func (s *Server) serveResourceMetadata(w http.ResponseWriter, r *http.Request, url string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		exchangeOf(r).errorCode = "method_not_allowed"
		s.writeJSON(w, r, http.StatusMethodNotAllowed, map[string]any{"error": "method_not_allowed"})
		return
	}
	servers := []string{s.issuer}
	if s.opts.MCP.AuthorizationServers != nil {
		servers = slices.Clone(s.opts.MCP.AuthorizationServers)
	}
	w.Header().Set("Cache-Control", "max-age=300")
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"resource":                 url,
		"authorization_servers":    servers,
		"scopes_supported":         []string{s.signin.read, s.signin.write},
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "Example Company MCP server",
	})
}

// bearerChallengeWriter adds error="invalid_token" to the Bearer challenge
// of requireBearer's 401 (RFC 6750 3.1, CO-6-09) and records the error
// code.
type bearerChallengeWriter struct {
	http.ResponseWriter
	x     *exchange
	wrote bool
}

func (w *bearerChallengeWriter) WriteHeader(code int) {
	if !w.wrote && code == http.StatusUnauthorized {
		h := w.Header()
		c := h.Get("WWW-Authenticate")
		if !strings.Contains(c, "error=") {
			rest := strings.TrimPrefix(c, "Bearer ")
			c = `Bearer error="invalid_token"`
			if rest != "" {
				c += ", " + rest
			}
			h.Set("WWW-Authenticate", c)
		}
		if w.x.errorCode == "" {
			w.x.errorCode = "invalid_token"
		}
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *bearerChallengeWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *bearerChallengeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *bearerChallengeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpAuth is what the verifier learned about a Bearer token.
type mcpAuth struct {
	sessionID string
	signedIn  bool
	account   string
	scopes    []string
}

// mcpAuthKey is the context key of a request's *mcpAuth.
type mcpAuthKey struct{}

// requireBearer answers a request to the MCP server at url without a
// Bearer token the fake accepts with 401 and a Bearer challenge naming the
// resource metadata (RFC 6750 3.1, RFC 9728 section 5.1), and passes the
// others on with their *mcpAuth in the context.
func (s *Server) requireBearer(url, metadataURL string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var auth *mcpAuth
		err := errors.New("no bearer token")
		if f := strings.Fields(r.Header.Get("Authorization")); len(f) == 2 && strings.EqualFold(f[0], "Bearer") {
			auth, err = s.verifyBearer(r, f[1], url)
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+metadataURL+`"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mcpAuthKey{}, auth)))
	})
}

// mcpAuthFrom returns the *mcpAuth requireBearer put in ctx, nil if none.
func mcpAuthFrom(ctx context.Context) *mcpAuth {
	a, _ := ctx.Value(mcpAuthKey{}).(*mcpAuth)
	return a
}

// verifyBearer checks a Bearer token sent to the MCP server at url against
// the fake's token store (spec 4.3, 6).
func (s *Server) verifyBearer(r *http.Request, value, url string) (*mcpAuth, error) {
	x := exchangeOf(r)
	x.authScheme, x.accessToken = "Bearer", value
	invalid := func(desc string) (*mcpAuth, error) {
		x.errorCode = "invalid_token"
		return nil, errors.New("invalid token: " + desc)
	}
	now := s.clock.Now()
	s.mu.Lock()
	t := s.tokens[value]
	var tc token
	var sess session
	if t != nil {
		tc = *t
		if ss := s.sessions[tc.sessionID]; ss != nil {
			s.lapseLocked(ss, now)
			sess = *ss
		}
	}
	s.mu.Unlock()
	if t == nil {
		return invalid("unknown token")
	}
	x.sessionID = tc.sessionID
	s.checkSuperseded(x.idx, &tc, now)
	switch {
	case tc.typ != "Bearer":
		// PA-4.3-19: a DPoP token belongs at the DPoP APIs only.
		s.violate(x.idx, "PA-4.3-19", "a DPoP Session Token was sent to the MCP server")
		return invalid("the MCP server accepts only Bearer Session Tokens")
	case tc.resource != url:
		// CO-6-06: only tokens issued for this server's url.
		if strings.HasPrefix(tc.resource, "https://") && strings.HasSuffix(tc.resource, "/mcp") {
			s.violate(x.idx, "PA-4.3-19", "a Bearer token issued for another MCP server was sent here")
		}
		return invalid("the token was not issued for this MCP server")
	case !now.Before(tc.expires):
		return invalid("the token has expired")
	case tc.revoked:
		return invalid("the token has been revoked")
	case sess.ended || sess.id == "":
		return invalid("the Session has ended")
	}
	s.useToken(&tc, now)
	a := &mcpAuth{sessionID: tc.sessionID}
	if tc.signedIn && (s.opts.SignIn.NoLiveSignInCheck || (sess.signedIn && sess.account == tc.account)) {
		a.signedIn, a.account, a.scopes = true, tc.account, slices.Clone(tc.scopes)
	}
	return a, nil
}

// mcpScopes enforces per-tool sign-in and scopes on tools/call requests
// before they reach the MCP server (CO-6-05).
func (s *Server) mcpScopes(next http.Handler) http.Handler {
	tools := s.mcpTools()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x := exchangeOf(r)
		a := mcpAuthFrom(r.Context())
		for _, name := range toolCalls(x.body) {
			need, ok := tools[name]
			if !ok || a == nil {
				continue
			}
			if need.signIn && !a.signedIn {
				s.writeBearerError(w, r, "sign_in_required", "")
				return
			}
			for _, sc := range need.scopes {
				if !slices.Contains(a.scopes, sc) {
					s.writeBearerError(w, r, "insufficient_scope", strings.Join(need.scopes, " "))
					return
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(x.body))
		next.ServeHTTP(w, r)
	})
}

// toolCalls returns the tool names of the tools/call requests in a JSON-RPC
// message or batch.
func toolCalls(body []byte) []string {
	type msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	var msgs []msg
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		_ = json.Unmarshal(b, &msgs)
	} else {
		var m msg
		if json.Unmarshal(b, &m) == nil {
			msgs = []msg{m}
		}
	}
	var out []string
	for _, m := range msgs {
		if m.Method == "tools/call" {
			out = append(out, m.Params.Name)
		}
	}
	return out
}

// writeBearerError answers 403 with a Bearer challenge (RFC 6750 3.1).
func (s *Server) writeBearerError(w http.ResponseWriter, r *http.Request, code, scope string) {
	x := exchangeOf(r)
	x.errorCode = code
	c := `Bearer error="` + code + `"`
	if scope != "" {
		c += `, scope="` + scope + `"`
	}
	c += `, resource_metadata="https://` + x.host + mcpResourceMetadataPath + `"`
	w.Header().Set("WWW-Authenticate", c)
	body := oauthError(code, "")
	if scope != "" {
		body["scope"] = scope
	}
	s.writeJSON(w, r, http.StatusForbidden, body)
}

// isMCPURL reports whether res is the url of one of the fake's MCP servers.
func (s *Server) isMCPURL(res string) bool {
	return res == s.mcpURL() || (s.opts.MCP.SecondServer && res == s.mcp2URL()) || slices.Contains(s.opts.MCP.OtherServers, res)
}
