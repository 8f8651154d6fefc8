package poppytest

// The MCP server on https://mcp.{primary}/mcp (spec 4.3, 6).
//
// It is a real MCP server built with github.com/modelcontextprotocol/go-sdk,
// speaking Streamable HTTP, behind the SDK's mcpauth.RequireBearerToken. The
// verifier accepts only Bearer Session Tokens from the fake's token store
// that were issued for this server's url (CO-6-06), unexpired by the Clock,
// unrevoked, of a live Session. Scopes are enforced per tool before the
// request reaches the MCP server: a tools/call of a tool that needs a
// signed-in token or scopes the token lacks gets 403 with
// WWW-Authenticate: Bearer error="sign_in_required" or
// error="insufficient_scope", scope="…" (CO-6-05, RFC 6750 3.1). A 401 says
// error="invalid_token" (CO-6-09) next to the resource_metadata the go-sdk
// middleware names.
//
// The protected resource metadata (RFC 9728) is served at the path-inserted
// location https://mcp.{primary}/.well-known/oauth-protected-resource/mcp and
// lists auth.issuer in authorization_servers (CO-6-07), unless
// MCPServerOptions.AuthorizationServers replaces them (negative).
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
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// MCPServerOptions configures the fake's MCP server (Options.MCP).
type MCPServerOptions struct {
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

// mcp2URL returns the url of the second MCP server (MCPServerOptions.SecondServer).
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

// mcpServerFor builds the handler of the MCP server whose url is url.
func (s *Server) mcpHandler(url string) http.Handler {
	// Pages of two tools, so that clients must follow nextCursor.
	srv := mcp.NewServer(&mcp.Implementation{Name: "poppytest-mcp", Version: "1.0.0"}, &mcp.ServerOptions{PageSize: mcpPageSize})
	s.addMCPTools(srv)
	s.mcpServers = append(s.mcpServers, srv)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		JSONResponse: true,
		// The fake listens on loopback for hosts that aren't loopback names;
		// the DNS rebinding check would refuse every request.
		DisableLocalhostProtection: true,
	})
	verify := func(ctx context.Context, value string, r *http.Request) (*mcpauth.TokenInfo, error) {
		return s.verifyBearer(r, value, url)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(url, "https://"), "/mcp")
	bearer := mcpauth.RequireBearerToken(verify, &mcpauth.RequireBearerTokenOptions{
		ResourceMetadataURL: "https://" + host + mcpResourceMetadataPath,
	})
	return bearer(s.mcpScopes(h))
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
	s.writeJSON(w, r, http.StatusOK, &oauthex.ProtectedResourceMetadata{
		Resource:               url,
		AuthorizationServers:   servers,
		ScopesSupported:        []string{s.signin.read, s.signin.write},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Example Company MCP server",
	})
}

// bearerChallengeWriter adds error="invalid_token" to the Bearer challenge
// of the go-sdk middleware's 401 (RFC 6750 3.1, CO-6-09) and records the
// error code.
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

// verifyBearer checks a Bearer token sent to the MCP server at url against
// the fake's token store (spec 4.3, 6).
func (s *Server) verifyBearer(r *http.Request, value, url string) (*mcpauth.TokenInfo, error) {
	x := exchangeOf(r)
	x.authScheme, x.accessToken = "Bearer", value
	invalid := func(desc string) (*mcpauth.TokenInfo, error) {
		x.errorCode = "invalid_token"
		return nil, fmt.Errorf("%w: %s", mcpauth.ErrInvalidToken, desc)
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
	// RequireBearerToken compares Expiration with the real clock: give it
	// the token's remaining lifetime by the fake Clock.
	return &mcpauth.TokenInfo{
		Scopes:     a.scopes,
		Expiration: time.Now().Add(tc.expires.Sub(now)),
		UserID:     tc.sessionID,
		Extra:      map[string]any{"poppytest": a},
	}, nil
}

// mcpScopes enforces per-tool sign-in and scopes on tools/call requests
// before they reach the MCP server (CO-6-05).
func (s *Server) mcpScopes(next http.Handler) http.Handler {
	tools := s.mcpTools()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x := exchangeOf(r)
		a, _ := mcpauth.TokenInfoFromContext(r.Context()).Extra["poppytest"].(*mcpAuth)
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

// Tool inputs and outputs.
type (
	searchIn struct {
		Query      string `json:"query" jsonschema:"words to look for in product names"`
		MaxResults int    `json:"max_results,omitempty" jsonschema:"at most this many products, default 10"`
	}
	product struct {
		SKU   string `json:"sku"`
		Name  string `json:"name"`
		Price int    `json:"price"`
	}
	searchOut struct {
		Products []product `json:"products"`
	}
	sizeIn struct {
		SKU      string `json:"sku" jsonschema:"the product's SKU"`
		HeightCM int    `json:"height_cm" jsonschema:"the User's height in centimetres"`
		ChestCM  int    `json:"chest_cm,omitempty" jsonschema:"the User's chest in centimetres"`
	}
	sizeOut struct {
		Size   string `json:"size"`
		Advice string `json:"advice"`
	}
	ordersOut struct {
		Orders []map[string]any `json:"orders"`
	}
	profileIn struct {
		HeightCM int `json:"height_cm" jsonschema:"the User's height in centimetres"`
		ChestCM  int `json:"chest_cm,omitempty" jsonschema:"the User's chest in centimetres"`
	}
	profileOut struct {
		Saved   bool   `json:"saved"`
		Account string `json:"account"`
	}
)

var fakeProducts = []product{
	{SKU: "stormline-m", Name: "Stormline Jacket", Price: 120},
	{SKU: "stormline-insulated-m", Name: "Stormline Insulated Jacket", Price: 190},
	{SKU: "trailhead-fleece-m", Name: "Trailhead Fleece", Price: 80},
}

func mcpAuthOf(req *mcp.CallToolRequest) *mcpAuth {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	a, _ := req.Extra.TokenInfo.Extra["poppytest"].(*mcpAuth)
	return a
}

func (s *Server) addMCPTools(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{Name: "search_products", Description: "Search the product catalogue by name."},
		func(ctx context.Context, req *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, searchOut, error) {
			out := searchOut{Products: []product{}}
			q := strings.ToLower(strings.TrimSpace(in.Query))
			for _, p := range fakeProducts {
				if q == "" || strings.Contains(strings.ToLower(p.Name), q) || strings.Contains(p.SKU, q) {
					out.Products = append(out.Products, p)
				}
				if in.MaxResults > 0 && len(out.Products) >= in.MaxResults {
					break
				}
			}
			return nil, out, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "size_advice", Description: "Recommend a size of a product for the User's measurements."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sizeIn) (*mcp.CallToolResult, sizeOut, error) {
			if in.HeightCM <= 0 || in.HeightCM > 250 {
				return nil, sizeOut{}, errors.New("height_cm must be between 1 and 250")
			}
			size := "M"
			switch {
			case in.HeightCM < 165:
				size = "S"
			case in.HeightCM >= 185:
				size = "L"
			}
			return nil, sizeOut{Size: size, Advice: "Size " + size + " fits a height of " + fmt.Sprint(in.HeightCM) + " cm."}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "list_orders", Description: "List the signed-in account's orders (needs " + s.signin.read + ")."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, ordersOut, error) {
			a := mcpAuthOf(req)
			if a == nil || !a.signedIn {
				return nil, ordersOut{}, errors.New("sign in first")
			}
			return nil, ordersOut{Orders: []map[string]any{
				{"id": "ord_7Hk2", "number": "1042", "status": "delivered", "account": a.account},
			}}, nil
		})
	s.addExchangeTool(srv)
	mcp.AddTool(srv, &mcp.Tool{Name: "save_size_profile", Description: "Save the User's measurements on their account (needs " + s.signin.write + ")."},
		func(ctx context.Context, req *mcp.CallToolRequest, in profileIn) (*mcp.CallToolResult, profileOut, error) {
			a := mcpAuthOf(req)
			if a == nil || !a.signedIn {
				return nil, profileOut{}, errors.New("sign in first")
			}
			return nil, profileOut{Saved: true, Account: a.account}, nil
		})
}

// isMCPURL reports whether res is the url of one of the fake's MCP servers.
func (s *Server) isMCPURL(res string) bool {
	return res == s.mcpURL() || (s.opts.MCP.SecondServer && res == s.mcp2URL()) || slices.Contains(s.opts.MCP.OtherServers, res)
}

// closeMCP ends the MCP sessions clients left open.
func (s *Server) closeMCP() {
	for _, srv := range s.mcpServers {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}
}

// addExchangeTool adds request_exchange, the order action that proposes an
// operation (OPS 4.2): the same exchange as POST /orders/{id}/exchanges,
// with the same key, so that one action proposed through either channel is
// one operation (OPS 4). Its result carries the operation in
// structuredContent.operation and the summary as text; nothing is done
// until the operation is confirmed at the operations endpoint. An agent
// that doesn't list the extension gets the exchange done at once, as the
// API does (CO-OPS2-03), or, with Operations.RequireOperations, a tool
// error naming extension_required.
func (s *Server) addExchangeTool(srv *mcp.Server) {
	schema := map[string]any{"type": "object", "required": []any{"order_id", "item_id", "replacement_sku"},
		"additionalProperties": false,
		"properties": map[string]any{
			"order_id":        map[string]any{"type": "string", "description": "the order"},
			"item_id":         map[string]any{"type": "string", "description": "the item of the order to exchange"},
			"replacement_sku": map[string]any{"type": "string", "description": "the SKU to exchange it for"},
		}}
	srv.AddTool(&mcp.Tool{Name: "request_exchange", InputSchema: schema,
		Description: "Exchange an item of an order for another product. Proposes an operation the User must approve (needs " + s.signin.read + " " + s.signin.write + ")."},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fail := func(msg string) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
			}
			a := mcpAuthOf(req)
			if a == nil || !a.signedIn {
				return fail("sign in first")
			}
			var in struct {
				OrderID        string `json:"order_id"`
				ItemID         string `json:"item_id"`
				ReplacementSKU string `json:"replacement_sku"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.OrderID == "" || in.ItemID == "" {
				return fail("order_id, item_id and replacement_sku are required")
			}
			if _, ok := jackets[in.ReplacementSKU]; !ok {
				return fail("unknown replacement_sku")
			}
			summary, terms := exchangeTerms(in.OrderID, in.ItemID, in.ReplacementSKU)
			key := in.OrderID + " " + in.ItemID
			op, err := s.proposeOperation(a.sessionID, operationProposal{Key: key, IDPrefix: "exc_", Summary: summary,
				Terms: terms, Scopes: []string{s.signin.read, s.signin.write}, Perform: exchangePerform})
			switch {
			case errors.Is(err, errNoOperations) && s.opts.Operations.RequireOperations:
				return fail("extension_required: exchanges need the operations extension")
			case errors.Is(err, errNoOperations): // CO-OPS2-03
				s.ops.mu.Lock()
				s.ops.actions = append(s.ops.actions, PerformedAction{Key: key, Terms: terms, Time: s.clock.Now()})
				s.ops.mu.Unlock()
				return &mcp.CallToolResult{
					Content:           []mcp.Content{&mcp.TextContent{Text: "Exchange requested."}},
					StructuredContent: map[string]any{"exchange_id": newID("exc_", 6), "order_id": in.OrderID, "status": "requested"},
				}, nil
			case err != nil:
				return fail("the exchange can't be proposed")
			}
			// OPS 4.2: the operation in structuredContent, the summary as text.
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: "Proposed: " + summary + " Not done until confirmed."}},
				StructuredContent: map[string]any{"operation": op},
			}, nil
		})
}
