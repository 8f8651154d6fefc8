package api

// OpenAPI APIs (spec 6).
//
// The description is fetched through the Agent's document cache (the same
// cache, HTTP caching and HTTPS rules as poppy.json), loaded by kin-openapi
// with external references refused (a Company's description must not make
// the agent fetch other URLs), validated, and indexed once: endpoints (an
// OpenAPI "operation", one method of one path) by operationId and by method
// and path template, each with its parameters and request-body schema as the
// description gives them, shared (one copy per schema of the description,
// however many endpoints use it). "Operation" in this package means the
// operations extension's operation only.
//
// Nothing is inlined when the description loads: inlining ($refs resolved)
// happens when a tool is built or ResolveSchema is called, and all of it,
// for every tool and call, draws on one budget per description
// (maxDescriptionNodes, maxDescriptionBytes); the tool schemas built are
// shared too, by their form before inlining. So the work and memory one
// description can cost are bounded as a whole, not only per schema.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/unicode/norm"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/wire"
	"github.com/poppyproto/poppy/operations"
)

// OpenAPIOptions configures LoadOpenAPI. The zero value is valid.
type OpenAPIOptions struct {
	// MaxDescriptionBytes caps the description. Zero means 4 MiB.
	MaxDescriptionBytes int64
	// MaxResponseBytes caps a response body Call reads. Zero means 4 MiB.
	MaxResponseBytes int64
	// Operations, if set, sends every call but GET, HEAD and OPTIONS
	// through its Propose, so that while an operation the same request
	// (method, URL and body; query parameters and JSON members in any
	// order) proposed is still open, nothing is sent and
	// the call returns that operation in a *operations.PendingError: the
	// SDK never asks for a new proposal of an action whose operation isn't
	// final, not even across restarts (OPS 6, PA-OPS6-04, A-38). It must
	// be a Client of the same Session; nil means the Session's Client, if
	// New made one (operations.SessionClient). The operation a call proposes is
	// then also the Client's to track; its Response holds the Client's
	// view of it, with Body {"operation": …} and no headers, and an
	// operation the Client refuses (OPS 3) is an error.
	Operations *operations.Client
}

const defaultMaxBytes = 4 << 20

// OpenAPI is one of the Company's OpenAPI APIs, loaded and indexed, bound
// to a Session. It is safe for concurrent use.
type OpenAPI struct {
	sess    *poppy.Session
	entry   poppy.API
	doc     *openapi3.T
	server  *url.URL
	client  *http.Client
	maxResp int64
	opsc    *operations.Client // OpenAPIOptions.Operations

	ops  []*Endpoint
	byID map[string]*Endpoint
	ix   *indexed
}

// Endpoint is one method of one path of an OpenAPI description (what
// OpenAPI calls an operation).
type Endpoint struct {
	// ID is the operationId; "" when the description gives none.
	ID string
	// Method is the HTTP method, upper case; Path is the path template.
	Method, Path string
	// Summary and Description are the Company's text, cleaned of control
	// characters.
	Summary, Description string
	// Parameters are the path, query and header parameters.
	Parameters []Parameter
	// Body is the JSON request body, nil when the endpoint takes none.
	Body *RequestBody
	// Scopes are the scopes its security requirements name.
	Scopes []string
	// ProposesOperation reports that the description gives a 202 answer,
	// which with the operations extension carries a proposed operation
	// (OPS 4.1).
	ProposesOperation bool

	segs []string
}

// Parameter is one parameter of an endpoint.
type Parameter struct {
	Name, In    string // In is "path", "query" or "header"
	Description string
	Required    bool
	// Schema is the parameter's JSON Schema as the description gives it:
	// a $ref in it points into the description. ResolveSchema inlines
	// them. Endpoints that use the same schema share it: callers must
	// not modify it.
	Schema json.RawMessage
}

// RequestBody is an endpoint's JSON request body.
type RequestBody struct {
	Required    bool
	ContentType string
	// Schema is the body's JSON Schema as the description gives it (see
	// Parameter.Schema).
	Schema json.RawMessage
}

// LoadOpenAPI loads the OpenAPI description of entry, one of the Company's
// APIs of type "openapi", for calls in sess. opts may be nil.
func LoadOpenAPI(ctx context.Context, sess *poppy.Session, entry poppy.API, opts *OpenAPIOptions) (*OpenAPI, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession // PA-4.3-24: no anonymous mode
	}
	if entry.Type != TypeOpenAPI {
		return nil, errWrongType
	}
	c := sess.Company()
	if !listed(c, entry) {
		return nil, ErrNotListed
	}
	var o OpenAPIOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxDescriptionBytes <= 0 {
		o.MaxDescriptionBytes = defaultMaxBytes
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = defaultMaxBytes
	}
	body, err := c.Agent().FetchDocument(ctx, entry.URL, &poppy.DocumentOptions{Name: "OpenAPI description", MaxBytes: o.MaxDescriptionBytes})
	if err != nil {
		return nil, err
	}
	return newOpenAPI(ctx, sess, entry, body, o)
}

// indexed is a parsed, validated and indexed description, shared by every
// OpenAPI loaded from the same bytes at the same URL.
type indexed struct {
	doc    *openapi3.T
	root   any // the description as JSON, for resolving $refs
	v30    bool
	server *url.URL
	ops    []*Endpoint
	byID   map[string]*Endpoint

	raw      map[*openapi3.SchemaRef]json.RawMessage // while indexing
	interned map[string]json.RawMessage              // while indexing

	mu      sync.Mutex
	budget  budget                 // left of the description's budget for resolving
	schemas map[string]inputSchema // input schemas built, by bound and form before inlining
}

// inputSchema is an input schema built from the description (see
// OpenAPI.InputSchema): inlined and bounded, or the error that stopped it.
type inputSchema struct {
	b   json.RawMessage
	err error
}

// maxInputSchemas bounds the input schemas kept per description; past it,
// they are built again (drawing on the budget).
const maxInputSchemas = 4096

// defaultMaxInputSchema is InputSchema's bound when maxBytes is zero.
const defaultMaxInputSchema = 16 << 10

// parsedCache keeps the last indexed description per URL, keyed by the
// SHA-256 of its bytes: a description the document cache still holds is
// not parsed again. It is a bounded memo of immutable values derived from
// public documents alone (no Session, token or User in it), so sharing it
// across Agents is safe.
//
// An indexed description holds many times its size (kin-openapi's model,
// its JSON form, the endpoints): the cache is bounded by the bytes of the
// descriptions it holds as well as by their number.
var parsedCache struct {
	sync.Mutex
	m     map[string]parsedEntry
	bytes int
}

type parsedEntry struct {
	sum  [32]byte
	ix   *indexed
	size int
}

const (
	maxParsedCache      = 64
	maxParsedCacheBytes = 16 << 20
)

// newOpenAPI parses, validates and indexes a description, or takes it from
// parsedCache.
func newOpenAPI(ctx context.Context, sess *poppy.Session, entry poppy.API, body []byte, o OpenAPIOptions) (*OpenAPI, error) {
	sum := sha256.Sum256(body)
	parsedCache.Lock()
	e, ok := parsedCache.m[entry.URL]
	parsedCache.Unlock()
	ix := e.ix
	if !ok || e.sum != sum {
		var err error
		if ix, err = index(ctx, entry, body); err != nil {
			return nil, err
		}
		parsedCache.Lock()
		if old, ok := parsedCache.m[entry.URL]; ok {
			parsedCache.bytes -= old.size
			delete(parsedCache.m, entry.URL)
		}
		if parsedCache.m == nil || len(parsedCache.m) >= maxParsedCache || parsedCache.bytes+len(body) > maxParsedCacheBytes {
			parsedCache.m, parsedCache.bytes = map[string]parsedEntry{}, 0
		}
		parsedCache.m[entry.URL] = parsedEntry{sum: sum, ix: ix, size: len(body)}
		parsedCache.bytes += len(body)
		parsedCache.Unlock()
	}
	if sess != nil {
		// The module's one URL check: HTTPS, or loopback http:// under
		// UnsafeAllowLoopbackHTTP.
		if _, err := sess.Company().Agent().ParseURL(ix.server.String()); err != nil {
			return nil, fmt.Errorf("%w: the server URL: %w", ErrInvalidDescription, err)
		}
	}
	oa := &OpenAPI{sess: sess, entry: entry, doc: ix.doc, server: ix.server, maxResp: o.MaxResponseBytes,
		opsc: o.Operations, ops: ix.ops, byID: ix.byID, ix: ix}
	if sess != nil {
		oa.client = sess.HTTPClient()
		if entry.Resource != "" {
			oa.client = sess.ResourceHTTPClient(entry.Resource) // PA-4.3-22
		}
	}
	return oa, nil
}

func index(ctx context.Context, entry poppy.API, body []byte) (*indexed, error) {
	doc, root, err := parseDescription(ctx, body)
	if err != nil {
		return nil, err
	}
	base, _ := url.Parse(entry.URL)
	server, err := serverURL(doc, base)
	if err != nil {
		return nil, err
	}
	ix := &indexed{doc: doc, root: root, v30: doc.IsOpenAPI30(), server: server, byID: map[string]*Endpoint{},
		raw: map[*openapi3.SchemaRef]json.RawMessage{}, interned: map[string]json.RawMessage{}, schemas: map[string]inputSchema{},
		budget: budget{nodes: maxDescriptionNodes, bytes: maxDescriptionBytes}}
	if err := ix.index(); err != nil {
		return nil, err
	}
	ix.raw, ix.interned = nil, nil
	return ix, nil
}

// parseDescription loads and validates an OpenAPI 3.0 or 3.1 description
// and returns it with its JSON form, for resolving $refs. YAML is read as
// JSON first, so that both take one path: the JSON form is checked for
// fan-out (checkFanOut) before kin-openapi resolves and validates it.
func parseDescription(ctx context.Context, body []byte) (*openapi3.T, any, error) {
	invalid := func(err error) error {
		return fmt.Errorf("%w: %s", ErrInvalidDescription, cleanText(err.Error(), 300))
	}
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' {
		var y any
		if err := yaml.Unmarshal(body, &y); err != nil {
			return nil, nil, invalid(err)
		}
		j, err := json.Marshal(jsonValue(y))
		if err != nil {
			return nil, nil, invalid(err)
		}
		b = j
	}
	var root any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, nil, invalid(err)
	}
	if err := checkFanOut(root); err != nil {
		return nil, nil, err
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	loader.Context = ctx
	// Decoded directly, without the YAML parser LoadFromData runs first
	// (most of its cost).
	doc := &openapi3.T{}
	err := json.Unmarshal(b, doc)
	if err == nil {
		err = loader.ResolveRefsIn(doc, nil)
	}
	if err != nil {
		return nil, nil, invalid(err)
	}
	if mm := doc.OpenAPIMajorMinor(); mm != "3.0" && mm != "3.1" {
		return nil, nil, fmt.Errorf("%w: OpenAPI version %q, want 3.0 or 3.1", ErrInvalidDescription, cleanText(doc.OpenAPI, 20))
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, nil, invalid(err)
	}
	return doc, root, nil
}

// jsonValue turns what YAML decoded into JSON values: mapping keys that
// aren't strings (a response code written 200) become strings.
func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, sv := range x {
			x[k] = jsonValue(sv)
		}
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, sv := range x {
			m[fmt.Sprint(k)] = jsonValue(sv)
		}
		return m
	case []any:
		for i, sv := range x {
			x[i] = jsonValue(sv)
		}
	}
	return v
}

// maxFanOut bounds the work references make kin-openapi do: it resolves
// and validates the target of a $ref at each place the $ref appears, so a
// description of a few MiB whose thousands of operations each refer to one
// wide schema costs far more than its size (an attack's 23,894 operations,
// about 15 s in kin-openapi alone). checkFanOut sums, over every $ref, the
// nodes of its target (not following the target's own references), and
// refuses a description over maxFanOut.
const maxFanOut = 1 << 22

func checkFanOut(root any) error {
	sizes := map[string]int{}
	total := 0
	var size func(v any) int
	size = func(v any) int {
		n := 1
		switch x := v.(type) {
		case map[string]any:
			if _, ok := x["$ref"].(string); ok {
				return 1
			}
			for _, sv := range x {
				n += size(sv)
			}
		case []any:
			for _, sv := range x {
				n += size(sv)
			}
		}
		return n
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				n, seen := sizes[ref]
				if !seen {
					if t, ok := pointer(root, ref); ok {
						n = size(t)
					}
					sizes[ref] = n
				}
				if total += n; total > maxFanOut {
					return false
				}
			}
			for _, sv := range x {
				if !walk(sv) {
					return false
				}
			}
		case []any:
			for _, sv := range x {
				if !walk(sv) {
					return false
				}
			}
		}
		return true
	}
	if !walk(root) {
		return fmt.Errorf("%w: its references make over %d nodes to resolve", ErrInvalidDescription, maxFanOut)
	}
	return nil
}

// serverURL is the first server's URL, its variables at their defaults,
// resolved against the description's URL (OpenAPI allows a relative one);
// the description's own origin without servers. It must be HTTPS.
func serverURL(doc *openapi3.T, base *url.URL) (*url.URL, error) {
	raw := "/"
	if len(doc.Servers) > 0 && doc.Servers[0] != nil {
		raw = doc.Servers[0].URL
		for name, v := range doc.Servers[0].Variables {
			if v != nil {
				raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
			}
		}
	}
	u, err := base.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%w: the server URL is not an HTTPS URL", ErrInvalidDescription)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

var methods = []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete,
	http.MethodOptions, http.MethodHead, http.MethodPatch, http.MethodTrace}

func (oa *indexed) index() error {
	paths := oa.doc.Paths.Map()
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		item := paths[p]
		if item == nil {
			continue
		}
		for _, m := range methods {
			op := item.GetOperation(m)
			if op == nil {
				continue
			}
			o, err := oa.newEndpoint(p, m, item, op)
			if err != nil {
				return err
			}
			if o.ID != "" {
				if _, dup := oa.byID[o.ID]; dup {
					return fmt.Errorf("%w: operationId %q appears twice", ErrInvalidDescription, cleanText(o.ID, 64))
				}
				oa.byID[o.ID] = o
			}
			oa.ops = append(oa.ops, o)
		}
	}
	return nil
}

// rawSchema returns sr as JSON, $refs kept: one copy per schema of the
// description, shared by every endpoint that uses it.
func (ix *indexed) rawSchema(sr *openapi3.SchemaRef) (json.RawMessage, error) {
	if b, ok := ix.raw[sr]; ok {
		return b, nil
	}
	b, err := json.Marshal(sr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidDescription, cleanText(err.Error(), 200))
	}
	if same, ok := ix.interned[string(b)]; ok {
		b = same // {"$ref": …} written at each endpoint: one copy
	} else {
		ix.interned[string(b)] = b
	}
	ix.raw[sr] = b
	return b, nil
}

var stringSchema = json.RawMessage(`{"type":"string"}`)

func (ix *indexed) newEndpoint(path, method string, item *openapi3.PathItem, op *openapi3.Operation) (*Endpoint, error) {
	doc := ix.doc
	o := &Endpoint{ID: op.OperationID, Method: method, Path: path,
		Summary: cleanText(op.Summary, maxText), Description: cleanText(op.Description, maxText),
		segs: strings.Split(strings.Trim(path, "/"), "/")}
	params := map[string]*openapi3.Parameter{}
	var order []string
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			k := pr.Value.In + " " + pr.Value.Name
			if _, ok := params[k]; !ok {
				order = append(order, k)
			}
			params[k] = pr.Value // the endpoint's own overrides the path item's
		}
	}
	for _, k := range order {
		p := params[k]
		if p.In == openapi3.ParameterInCookie {
			continue // the SDK sends no cookies (spec 4.3)
		}
		schema := stringSchema
		if p.Schema != nil {
			s, err := ix.rawSchema(p.Schema)
			if err != nil {
				return nil, err
			}
			schema = s
		}
		o.Parameters = append(o.Parameters, Parameter{Name: p.Name, In: p.In, Required: p.Required || p.In == openapi3.ParameterInPath,
			Description: cleanText(p.Description, maxText), Schema: schema})
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		for _, ct := range []string{"application/json"} {
			mt := rb.Value.Content.Get(ct)
			if mt == nil {
				continue
			}
			schema := json.RawMessage(`{}`)
			if mt.Schema != nil {
				s, err := ix.rawSchema(mt.Schema)
				if err != nil {
					return nil, err
				}
				schema = s
			}
			o.Body = &RequestBody{Required: rb.Value.Required, ContentType: ct, Schema: schema}
		}
	}
	sec := doc.Security
	if op.Security != nil {
		sec = *op.Security
	}
	for _, req := range sec {
		for _, scopes := range req {
			for _, sc := range scopes {
				if !slices.Contains(o.Scopes, sc) {
					o.Scopes = append(o.Scopes, sc)
				}
			}
		}
	}
	if op.Responses != nil && op.Responses.Value("202") != nil {
		o.ProposesOperation = true
	}
	return o, nil
}

// ResolveSchema returns schema (a Parameter's or a RequestBody's) with
// every $ref resolved against the description, in JSON Schema 2020-12
// terms (an OpenAPI 3.0 schema converted): a recursive schema is cut after
// 10 levels of references to {} (any value), and a reference outside the
// description becomes {} too. It fails with an error saying the
// schema is too large when the result would pass 20,000 nodes or 1 MiB of
// strings, or when the description's budget for resolving schemas, which
// the tools built from it draw on too, is spent.
func (oa *OpenAPI) ResolveSchema(schema json.RawMessage) (json.RawMessage, error) {
	var v any
	if err := json.Unmarshal(schema, &v); err != nil {
		return nil, apiError("schema: %w", err)
	}
	ix := oa.ix
	ix.mu.Lock()
	out, _, err := resolveRefs(v, ix.root, maxSchemaDepth, &ix.budget)
	ix.mu.Unlock()
	if err != nil {
		if ix.budget.nodes <= 0 || ix.budget.bytes <= 0 {
			return nil, errBudgetSpent
		}
		return nil, err
	}
	if ix.v30 {
		from30(out)
	}
	return json.Marshal(out)
}

// InputSchema returns ep's arguments as one JSON Schema (draft 2020-12)
// of an object, the shape a model or a form fills in: a property per
// parameter, and "body" for the request body ("request_body" when a
// parameter is called body; ArgsOf splits such an object back). Every $ref
// is inlined, an OpenAPI 3.0 schema is converted, and the result fits in
// maxBytes (zero means 16 KiB): as it is, or with fewer levels of
// references expanded, or with descriptions dropped, or at last with
// nested subschemas cut to {} (any value). Endpoints whose arguments have
// the same form share one result, built once; building draws on the
// description's budget for resolving schemas, and past it the schema is
// refused as too large. Callers must not modify the result.
func (oa *OpenAPI) InputSchema(ep *Endpoint, maxBytes int) (json.RawMessage, error) {
	if !slices.Contains(oa.ops, ep) {
		return nil, fmt.Errorf("%w: not an endpoint of this description", errUnknownEndpoint)
	}
	if maxBytes <= 0 {
		maxBytes = defaultMaxInputSchema
	}
	// The form before inlining: the parameters' and the body's schemas as
	// the description gives them, shared with every endpoint that has the
	// same ones.
	props := map[string]any{}
	var required []string
	for _, p := range ep.Parameters {
		var s any = p.Schema
		if p.Description != "" {
			m := map[string]any{"description": p.Description}
			if json.Unmarshal(p.Schema, &m) != nil {
				m = map[string]any{"description": p.Description}
			}
			m["description"] = p.Description
			s = m
		}
		props[p.Name] = s
		if p.Required {
			required = append(required, p.Name)
		}
	}
	if ep.Body != nil {
		props[ep.bodyArg()] = ep.Body.Schema
		if ep.Body.Required {
			required = append(required, ep.bodyArg())
		}
	}
	schema := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		schema["required"] = required
	}
	form, err := json.Marshal(schema)
	if err != nil {
		return nil, apiError("%s %s: input schema: %w", ep.Method, cleanText(ep.Path, 200), err)
	}
	built := oa.ix.inputSchema(form, maxBytes)
	if built.err != nil {
		return nil, apiError("%s %s: input schema: %w", ep.Method, cleanText(ep.Path, 200), built.err)
	}
	return built.b, nil
}

// bodyArg is the name of the request body among the arguments of
// InputSchema: "body", unless a parameter has that name.
func (ep *Endpoint) bodyArg() string {
	for _, p := range ep.Parameters {
		if p.Name == "body" {
			return "request_body"
		}
	}
	return "body"
}

// ArgsOf splits obj, an object shaped by InputSchema, into the Args of a
// call of ep: the body's property becomes Body, every other one a Param.
func (ep *Endpoint) ArgsOf(obj map[string]any) *Args {
	a := &Args{Params: map[string]any{}}
	body := ep.bodyArg()
	for k, v := range obj {
		if k == body && ep.Body != nil {
			a.Body = v
			continue
		}
		a.Params[k] = v
	}
	return a
}

// inputSchema returns the input schema of form (a JSON Schema whose $refs
// point into the description), inlined and bounded to maxBytes: built once
// per form and bound, drawing on the description's budget, and then
// shared.
func (ix *indexed) inputSchema(form []byte, maxBytes int) inputSchema {
	key := strconv.Itoa(maxBytes) + " " + string(form)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if is, ok := ix.schemas[key]; ok {
		return is
	}
	var is inputSchema
	var v any
	if is.err = json.Unmarshal(form, &v); is.err == nil {
		is.b, is.err = boundSchema(v, ix.root, maxBytes, &ix.budget, ix.v30)
	}
	if len(ix.schemas) >= maxInputSchemas {
		clear(ix.schemas)
	}
	ix.schemas[key] = is
	return is
}

// Entry returns the poppy.json entry.
func (oa *OpenAPI) Entry() poppy.API { return oa.entry }

// Document returns the loaded description. Callers must not modify it: it
// is shared with every OpenAPI loaded from the same description.
func (oa *OpenAPI) Document() *openapi3.T { return oa.doc }

// ServerURL returns the base URL calls go to: the description's first
// server, resolved. Give it to a generated client with HTTPClient.
func (oa *OpenAPI) ServerURL() string { return oa.server.String() }

// Endpoints returns the endpoints, sorted by path and then method.
// Callers must not modify them.
func (oa *OpenAPI) Endpoints() []*Endpoint { return slices.Clone(oa.ops) }

// Endpoint returns the endpoint with operationId id.
func (oa *OpenAPI) Endpoint(id string) (*Endpoint, bool) {
	o, ok := oa.byID[id]
	return o, ok
}

// Find returns the endpoint for method and path, where path is a template
// of the description ("/orders/{id}") or a path it matches ("/orders/ord_1").
func (oa *OpenAPI) Find(method, path string) (*Endpoint, bool) {
	method = strings.ToUpper(method)
	for _, o := range oa.ops {
		if o.Method == method && o.Path == path {
			return o, true
		}
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, o := range oa.ops {
		if o.Method == method && matchSegs(o.segs, segs) {
			return o, true
		}
	}
	return nil, false
}

func matchSegs(tmpl, segs []string) bool {
	if len(tmpl) != len(segs) {
		return false
	}
	for i, t := range tmpl {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if t != segs[i] {
			return false
		}
	}
	return true
}

// HTTPClient returns the Session's *http.Client for this API, for a
// generated client such as oapi-codegen's (WithHTTPClient): DPoP token and
// proof on every request, answers returned as responses whatever their
// status (see poppy.ResponseError).
//
// When the entry names a resource, every token it sends was issued for it.
func (oa *OpenAPI) HTTPClient() *http.Client {
	c := *oa.client
	return &c
}

// Transport returns the Session's http.RoundTripper for this API (see
// HTTPClient).
func (oa *OpenAPI) Transport() http.RoundTripper { return oa.client.Transport }

// Args are the arguments of a call: parameter values by name (path, query
// and header parameters alike) and the JSON body.
type Args struct {
	// Params holds a value per parameter name: a string, bool, number, or
	// a slice of them for a query parameter that repeats.
	Params map[string]any
	// Body is sent as JSON: a json.RawMessage or []byte as it is, anything
	// else marshalled.
	Body any
}

// Response is an API's answer of a status below 400.
type Response struct {
	Status int
	Header http.Header
	// Body is the body, at most MaxResponseBytes.
	Body []byte
	// Operation is the operation a 202 answer proposes (OPS 4.1): with
	// OpenAPIOptions.Operations, that Client's view of it. The action is
	// not done until it is confirmed at the operations endpoint with the
	// User's approval. Nil otherwise. A 202 whose operation breaks the
	// extension's rules is an error matching operations.ErrProtocol.
	Operation *operations.Operation
}

// JSON decodes the body into v.
func (r *Response) JSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return apiError("decoding response: %w", err)
	}
	return nil
}

// Call calls the endpoint with operationId id. An answer of 400 or above
// is returned as a *poppy.Error (see the package doc).
func (oa *OpenAPI) Call(ctx context.Context, id string, args *Args) (*Response, error) {
	o, ok := oa.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", errUnknownEndpoint, cleanText(id, 64))
	}
	return oa.call(ctx, o, args)
}

// CallEndpoint calls ep, one of oa's Endpoints.
func (oa *OpenAPI) CallEndpoint(ctx context.Context, ep *Endpoint, args *Args) (*Response, error) {
	if !slices.Contains(oa.ops, ep) {
		return nil, fmt.Errorf("%w: not an endpoint of this description", errUnknownEndpoint)
	}
	return oa.call(ctx, ep, args)
}

// CallPath calls the endpoint for method and path (see Find). Path
// parameters come from args, or from the path itself when it isn't a
// template.
func (oa *OpenAPI) CallPath(ctx context.Context, method, path string, args *Args) (*Response, error) {
	o, ok := oa.Find(method, path)
	if !ok {
		return nil, fmt.Errorf("%w: %s %s", errUnknownEndpoint, strings.ToUpper(method), cleanText(path, 200))
	}
	if path != o.Path {
		var a Args
		if args != nil {
			a = *args
		}
		a.Params = mapsClone(a.Params)
		segs := strings.Split(strings.Trim(path, "/"), "/")
		for i, t := range o.segs {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				if _, set := a.Params[t[1:len(t)-1]]; !set {
					v, _ := url.PathUnescape(segs[i])
					a.Params[t[1:len(t)-1]] = v
				}
			}
		}
		args = &a
	}
	return oa.call(ctx, o, args)
}

func mapsClone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// request builds the HTTP request for o.
func (oa *OpenAPI) request(ctx context.Context, o *Endpoint, args *Args) (*http.Request, error) {
	var a Args
	if args != nil {
		a = *args
	}
	path := o.Path
	q := url.Values{}
	hdr := http.Header{}
	for _, p := range o.Parameters {
		v, ok := a.Params[p.Name]
		if !ok || v == nil {
			if p.Required {
				return nil, fmt.Errorf("%w: %s %s: parameter %q is required", ErrInvalidArguments, o.Method, o.Path, p.Name)
			}
			continue
		}
		vals, err := paramValues(v)
		if err != nil {
			return nil, fmt.Errorf("%w: parameter %q: %w", ErrInvalidArguments, p.Name, err)
		}
		switch p.In {
		case openapi3.ParameterInPath:
			if len(vals) != 1 || vals[0] == "" {
				return nil, fmt.Errorf("%w: path parameter %q needs one non-empty value", ErrInvalidArguments, p.Name)
			}
			if dotSegment(vals[0]) {
				return nil, fmt.Errorf("%w: path parameter %q: %w", ErrInvalidArguments, p.Name, errDotSegment)
			}
			path = strings.ReplaceAll(path, "{"+p.Name+"}", url.PathEscape(vals[0]))
		case openapi3.ParameterInQuery:
			for _, s := range vals {
				q.Add(p.Name, s)
			}
		case openapi3.ParameterInHeader:
			if strings.EqualFold(p.Name, "Authorization") || strings.EqualFold(p.Name, "DPoP") {
				continue // the transport owns these
			}
			hdr.Set(p.Name, strings.Join(vals, ","))
		}
	}
	// path is escaped (values through url.PathEscape): it is the RawPath,
	// and Path its decoding, so that a value's "/" or "%" is sent as
	// "%2F" or "%25", escaped once.
	u := *oa.server
	u.RawPath = oa.server.EscapedPath() + path
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	} else {
		u.Path = oa.server.Path + path
	}
	u.RawQuery = q.Encode()
	var body io.Reader
	var raw []byte
	if a.Body != nil {
		switch b := a.Body.(type) {
		case json.RawMessage:
			raw = b
		case []byte:
			raw = b
		default:
			var err error
			if raw, err = json.Marshal(b); err != nil {
				return nil, fmt.Errorf("%w: body: %w", ErrInvalidArguments, err)
			}
		}
		body = bytes.NewReader(raw)
	} else if o.Body != nil && o.Body.Required {
		return nil, fmt.Errorf("%w: %s %s needs a body", ErrInvalidArguments, o.Method, o.Path)
	}
	req, err := http.NewRequestWithContext(ctx, o.Method, u.String(), body)
	if err != nil {
		return nil, apiError("%w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		ct := "application/json"
		if o.Body != nil {
			ct = o.Body.ContentType
		}
		req.Header.Set("Content-Type", ct)
	}
	return req, nil
}

// dotSegment reports whether v, a path parameter's value, could be read
// as a "." or ".." segment by the server or by a proxy in front of it,
// which would then remove it with the segment before (RFC 3986 5.2.4):
// "/users/{id}/orders" with id ".." would become "/orders". Escaping is no
// defence: "%2E" is an unreserved character's encoding that normalisers
// decode (RFC 3986 6.2.2.2), and some decode twice. So v is read the way
// the most lenient reader in a chain would: percent-decoded until nothing
// changes (invalid escapes left as they are), NFKC-normalised (U+2025
// becomes "..", U+FF0E "."), with "\" as a separator (IIS) and what
// follows ";" in a segment dropped (Tomcat's "..;x"); no segment of the
// result may be "." or "..". Three or more dots are an ordinary segment.
func dotSegment(v string) bool {
	for range 8 {
		d := lenientUnescape(v)
		if d == v {
			break
		}
		v = d
	}
	v = norm.NFKC.String(v)
	v = strings.ReplaceAll(v, "\\", "/")
	for seg := range strings.SplitSeq(v, "/") {
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// lenientUnescape decodes every valid %XX in s and keeps the rest.
func lenientUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if h, ok := unhex(s[i+1]); ok {
				if l, ok := unhex(s[i+2]); ok {
					b.WriteByte(h<<4 | l)
					i += 2
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func paramValues(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case bool:
		return []string{strconv.FormatBool(x)}, nil
	case int:
		return []string{strconv.Itoa(x)}, nil
	case int64:
		return []string{strconv.FormatInt(x, 10)}, nil
	case float64:
		return []string{strconv.FormatFloat(x, 'f', -1, 64)}, nil
	case json.Number:
		return []string{x.String()}, nil
	case []string:
		return x, nil
	case []any:
		var out []string
		for _, e := range x {
			s, err := paramValues(e)
			if err != nil || len(s) != 1 {
				return nil, errors.New("an array may hold only strings, numbers and booleans")
			}
			out = append(out, s[0])
		}
		return out, nil
	case fmt.Stringer:
		return []string{x.String()}, nil
	}
	return nil, fmt.Errorf("unsupported value of type %T", v)
}

// operations returns the Client the OpenAPI hands operations to:
// OpenAPIOptions.Operations, else the Session's (operations.SessionClient).
func (oa *OpenAPI) operations() *operations.Client {
	if oa.opsc != nil {
		return oa.opsc
	}
	return operations.SessionClient(oa.sess)
}

func (oa *OpenAPI) call(ctx context.Context, o *Endpoint, args *Args) (*Response, error) {
	req, err := oa.request(ctx, o, args)
	if err != nil {
		return nil, err
	}
	var resp *http.Response
	opsc := oa.operations()
	if safe := req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions; opsc != nil && !safe {
		// OPS 6, A-38: one proposal per request while it is open.
		var op *operations.Operation
		if op, resp, err = opsc.Propose(ctx, req, operations.OpenAPIAction(o.Method, o.Path), &operations.ProposeOptions{HTTPClient: oa.client}); err != nil {
			return nil, wire.URLErrorCause(err)
		}
		if op != nil {
			wire, err := op.MarshalJSON()
			if err != nil {
				return nil, err
			}
			body, _ := json.Marshal(map[string]json.RawMessage{"operation": wire})
			return &Response{Status: http.StatusAccepted, Header: http.Header{}, Body: body, Operation: op}, nil
		}
	} else if resp, err = oa.client.Do(req); err != nil {
		return nil, wire.URLErrorCause(err)
	}
	defer resp.Body.Close()
	if perr := poppy.ResponseError(resp); perr != nil {
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		return nil, perr
	}
	b, err := bounded.ReadAll(resp.Body, oa.maxResp)
	if errors.Is(err, bounded.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %s %s", poppy.ErrResponseTooLarge, o.Method, endpointOf(req.URL))
	}
	if err != nil {
		return nil, apiError("%s %s: reading response: %w", o.Method, endpointOf(req.URL), err)
	}
	out := &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if resp.StatusCode == http.StatusAccepted {
		if raw := operationOf(b); raw != nil {
			if out.Operation, err = operations.Parse(raw); err != nil {
				return nil, fmt.Errorf("api: %s %s: the 202's operation: %w", o.Method, endpointOf(req.URL), err)
			}
			// A safe method went around Propose: the Client still sees
			// every operation read with it (OPS 4), as Propose's are.
			if opsc != nil {
				if out.Operation, err = opsc.Observe(out.Operation, operations.OpenAPIAction(o.Method, o.Path)); err != nil {
					return nil, fmt.Errorf("api: %s %s: the 202's operation: %w", o.Method, endpointOf(req.URL), err)
				}
			}
		}
	}
	return out, nil
}

// operationOf returns the "operation" member of a JSON object when it is an
// object with an operation_id (OPS 3, 4.1), else nil.
func operationOf(b []byte) json.RawMessage {
	var v struct {
		Operation json.RawMessage `json:"operation"`
	}
	if json.Unmarshal(b, &v) != nil || len(v.Operation) == 0 {
		return nil
	}
	var op struct {
		ID string `json:"operation_id"`
	}
	if json.Unmarshal(v.Operation, &op) != nil || op.ID == "" {
		return nil
	}
	return v.Operation
}
