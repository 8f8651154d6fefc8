package llmtools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/companytext"
	"github.com/poppyproto/poppy/internal/redact"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/signin"
)

// MaxDescription bounds every tool description, in bytes: a longer one is
// cut at a rune boundary.
const MaxDescription = 1024

// maxName bounds tool names, as the OpenAI format and MCP hosts expect.
const maxName = 64

// maxOps bounds the operations a Toolkit remembers per Company.
const maxOps = 256

// Options configures New. Nil means the defaults of each field.
type Options struct {
	// Approver is the User's own interface: the only source of a User's
	// approval (PA-OPS5-03). Nil means operations wait: the model is told
	// the operation awaits the User's approval, and nothing is confirmed
	// unless a standing permission covers it.
	Approver operations.Approver
	// Elicitation, instead of an Approver, asks the User for each approval
	// through MCP elicitation in the host's UI (a form with one boolean,
	// "approve"), for the tool calls a server from NewMCPServer serves.
	// Only an "accept" answer with approve true, to a question that server
	// asked about that revision, approves; decline, cancel, an answer
	// nobody asked for, a host without elicitation or a call not served
	// over MCP never do. Setting both Elicitation and
	// Approver is an error.
	Elicitation bool
	// ApproveElsewhere, when set, says where the User can approve an
	// operation themselves when the Approver could not ask them (an MCP
	// host without elicitation, a command without a terminal): a command
	// or a link for the User, such as "poppy ops confirm example.com
	// exc_1", given the Company's domain as added and the operation's ID.
	// The model is told to show the User the operation's summary and terms
	// and that, and the tool result carries it as "approve_with". Nil, or
	// "": the model is told the operation awaits the User's approval in
	// the agent's own interface.
	ApproveElsewhere func(domain, operationID string) string
	// Prompter shows the User where to sign in (a link and a code). Nil
	// means poppy_sign_in answers that the User must sign in in the
	// agent's own interface.
	Prompter signin.UserPrompter
	// APIs configures the tools made of each Company's APIs.
	APIs *APIOptions
	// Operations is passed to operations.New; its Approver is replaced by
	// Approver.
	Operations *operations.Options
	// Logger receives IDs and states, never a secret. Nil discards.
	Logger *slog.Logger
}

// Tool is one tool offered to a model.
type Tool struct {
	// Name is stable and unique in its Toolkit: [A-Za-z0-9_-]{1,64}.
	Name string
	// Description is for the model, at most MaxDescription bytes.
	Description string
	// InputSchema is a JSON Schema (draft 2020-12) of the arguments, a
	// JSON object, without $ref.
	InputSchema json.RawMessage
	// Domain is the domain of the Company whose API the tool calls, ""
	// for the agent's own tools.
	Domain string
	// API is the poppy.json entry a Company tool calls (zero for the
	// agent's own), and Action what it does, as a standing permission
	// names it: operations.OpenAPIAction of an endpoint or
	// operations.ToolAction of an MCP tool.
	API    poppy.API
	Action operations.Action

	k         *Toolkit
	schema    *jsonschema.Schema
	run       func(ctx context.Context, args json.RawMessage) (any, error)
	maxResult int // bounds a Company tool's result; 0: not bounded
}

// Toolkit is the set of tools a runtime hands its model for one User:
// the agent's own tools and those of every Company added. It is safe for
// concurrent use. Close it when done.
type Toolkit struct {
	agent *poppy.Agent
	user  string
	opts  Options
	log   *slog.Logger

	bg     context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	own    []*Tool
	comps  map[string]*company
	order  []string
	byName map[string]*Tool
	convs  map[string]*conversation.Conversation // by company key and ID, bounded
	// compiled holds the compiled input schemas by the SHA-256 of their
	// bytes, at most maxCompiled.
	compiled map[[sha256.Size]byte]*jsonschema.Schema
}

const maxCompiled = 4096

// company is one Company added to the Toolkit.
type company struct {
	domain string
	key    string
	sess   *poppy.Session
	mcps   []*api.MCP         // the MCP connections its tools use
	ops    *operations.Client // nil when the Company doesn't offer the extension
	tools  []*Tool
	opIDs  []string
	signIn *signInState
}

type signInState struct {
	done chan struct{}
	err  error
}

// New returns a Toolkit that acts for user (the agent's local identifier
// of the User, as for Company.Session) with agent.
func New(agent *poppy.Agent, user string, opts *Options) (*Toolkit, error) {
	if agent == nil {
		return nil, errors.New("llmtools: nil Agent")
	}
	if user == "" {
		return nil, errors.New("llmtools: empty user")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Elicitation && o.Approver != nil {
		return nil, errors.New("llmtools: Options.Elicitation and Options.Approver both set: the User is asked one way")
	}
	if o.Elicitation {
		o.Approver = operations.ApproverFunc(elicit)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	bg, stop := context.WithCancel(context.Background())
	k := &Toolkit{agent: agent, user: user, opts: o, log: o.Logger, bg: bg, stop: stop,
		comps: map[string]*company{}, byName: map[string]*Tool{}, compiled: map[[sha256.Size]byte]*jsonschema.Schema{}}
	for _, t := range append(k.ownTools(), k.conversationTools()...) {
		if err := k.add(t); err != nil {
			stop()
			return nil, err
		}
		k.own = append(k.own, t)
	}
	return k, nil
}

// Tools returns every tool: the agent's own, then each Company's in the
// order the Companies were added.
func (k *Toolkit) Tools() []*Tool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := slices.Clone(k.own)
	for _, d := range k.order {
		out = append(out, k.comps[d].tools...)
	}
	return out
}

// Tool returns the tool called name.
func (k *Toolkit) Tool(name string) (*Tool, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.byName[name]
	return t, ok
}

// Execute runs the tool called name; an unknown name is a result too.
func (k *Toolkit) Execute(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	t, ok := k.Tool(name)
	if !ok {
		return k.result(ctx, map[string]any{"error": "unknown_tool", "message": "no tool is called " + k.text(ctx, name, 64)}, 0)
	}
	return t.Execute(ctx, args)
}

// Session returns the Session of the Company at domain, once added.
func (k *Toolkit) Session(domain string) (*poppy.Session, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.comps[strings.ToLower(domain)]
	if !ok {
		return nil, false
	}
	return c.sess, true
}

// Operations returns the operations client of the Company at domain, nil
// when it isn't added or doesn't offer the extension.
func (k *Toolkit) Operations(domain string) *operations.Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.comps[strings.ToLower(domain)]; ok {
		return c.ops
	}
	return nil
}

// Close stops sign-ins still waiting for the User and ends the Companies'
// MCP connections.
func (k *Toolkit) Close() error {
	k.stop()
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, c := range k.comps {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// AddCompany discovers the Company at domain, opens the User's Session
// there and adds its tools; adding it again changes nothing. It returns
// the names of the Company's tools. An API that fails to load is left out
// and its error joined into the returned error.
func (k *Toolkit) AddCompany(ctx context.Context, domain string) ([]string, error) {
	domain = strings.ToLower(strings.TrimSpace(domain))
	k.mu.Lock()
	if c, ok := k.comps[domain]; ok {
		k.mu.Unlock()
		return toolNames(c.tools), nil
	}
	k.mu.Unlock()
	co, err := k.agent.Company(ctx, domain)
	if err != nil {
		return nil, err
	}
	sess, err := co.Session(ctx, k.user, nil)
	if err != nil {
		return nil, err
	}
	c := &company{domain: domain, key: companyKey(domain), sess: sess}
	var oo operations.Options
	if k.opts.Operations != nil {
		oo = *k.opts.Operations
	}
	oo.Approver = k.opts.Approver
	if oc, err := operations.New(sess, &oo); err == nil {
		c.ops = oc
	} else if !errors.Is(err, operations.ErrNotSupported) {
		return nil, err
	}
	// The Company's OpenAPI and MCP calls go through the operations client, so a
	// model calling a tool again while the operation it proposed is open
	// proposes nothing (OPS 6, PA-OPS6-04): it gets the open one back.
	tools, loadErr := k.apiTools(ctx, c)
	if tools == nil && ctx.Err() != nil {
		_ = c.close() // the error that matters is loadErr
		return nil, loadErr
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if prev, ok := k.comps[domain]; ok { // added meanwhile
		_ = c.close()
		return toolNames(prev.tools), loadErr
	}
	var errs []error
	if loadErr != nil {
		errs = append(errs, loadErr)
	}
	for _, t := range tools {
		if err := k.add(t); err != nil {
			errs = append(errs, err)
			continue
		}
		c.tools = append(c.tools, t)
	}
	k.comps[domain] = c
	k.order = append(k.order, domain)
	return toolNames(c.tools), errors.Join(errs...)
}

func toolNames(ts []*Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]+`)

func companyKey(domain string) string {
	k := strings.Trim(nonAlnum.ReplaceAllString(domain, "_"), "_")
	if k == "" {
		k = "company"
	}
	return k
}

func fitName(n string) string {
	if len(n) <= maxName {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:maxName-9] + "_" + hex.EncodeToString(sum[:4])
}

// add checks t's description and schema and registers it. k.mu is held
// or k not yet shared.
func (k *Toolkit) add(t *Tool) error {
	for i := 2; k.byName[t.Name] != nil; i++ {
		t.Name = fitName(fmt.Sprintf("%s_%d", strings.TrimSuffix(t.Name, fmt.Sprintf("_%d", i-1)), i))
	}
	t.k = k
	t.Description = plain(t.Description, MaxDescription)
	// Endpoints of the same form share one input schema (package api
	// builds it once), and so one compiled schema here.
	sum := sha256.Sum256(t.InputSchema)
	s, ok := k.compiled[sum]
	if !ok {
		var err error
		if s, err = compileSchema(t.Name, t.InputSchema); err != nil {
			return fmt.Errorf("llmtools: tool %s: invalid input schema: %s", t.Name, plain(err.Error(), 200))
		}
		if len(k.compiled) >= maxCompiled {
			clear(k.compiled)
		}
		k.compiled[sum] = s
	}
	t.schema = s
	k.byName[t.Name] = t
	return nil
}

type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("llmtools: schema reference %q is not loaded", plain(u, 100))
}

// compileSchema compiles schema as JSON Schema 2020-12, loading nothing.
func compileSchema(name string, schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	if m, ok := doc.(map[string]any); !ok || m["type"] != "object" {
		return nil, errors.New("the schema is not of an object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	loc := "urn:poppy:llmtools:" + url.PathEscape(name)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// Execute runs the tool with the model's arguments (a JSON object) and
// returns the result for the model as JSON. Arguments that don't match the
// input schema, and refusals, are results too ({"error": …}); the error is
// non-nil only when ctx ended.
func (t *Tool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return t.k.result(ctx, errResult("invalid_arguments", "the arguments are not JSON"), t.maxResult)
	}
	if err := t.schema.Validate(inst); err != nil {
		return t.k.result(ctx, errResult("invalid_arguments", t.k.text(ctx, err.Error(), 500)), t.maxResult)
	}
	out, err := t.run(ctx, args)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return t.k.result(ctx, t.k.errorOf(ctx, t, err), t.maxResult)
	}
	return t.k.result(ctx, out, t.maxResult)
}

func errResult(code, msg string) map[string]any {
	return map[string]any{"error": code, "message": msg}
}

// errorOf turns t's error into a result for the model, its text
// scrubbed before it is cut.
func (k *Toolkit) errorOf(ctx context.Context, t *Tool, err error) map[string]any {
	var pend *operations.PendingError
	if errors.As(err, &pend) && pend.Operation != nil {
		// OPS 6: not proposed again; the model sees the open one.
		out := map[string]any{"error": "operation_pending",
			"message": "An operation this same request proposed is still open, so it was not proposed again. " +
				"It takes effect only if the User approves it; nothing else has happened."}
		if c := k.companyOf(t); c != nil {
			k.proposedInto(ctx, c, out, pend.Operation)
		}
		return out
	}
	var pe *poppy.Error
	if errors.As(err, &pe) {
		out := map[string]any{"error": pe.Code, "message": k.text(ctx, pe.Description, 500), "status": pe.Status}
		if out["error"] == "" {
			out["error"] = "error"
		}
		if len(pe.Scope) > 0 {
			out["scope"] = pe.Scope
		}
		if pe.Extension != "" {
			out["extension"] = pe.Extension
		}
		if len(pe.SignInTypes) > 0 {
			out["sign_in_types"] = pe.SignInTypes
			out["hint"] = "The User must sign in: call poppy_sign_in with this Company's domain."
		}
		return out
	}
	if errors.Is(err, api.ErrInvalidArguments) {
		return errResult("invalid_arguments", k.text(ctx, err.Error(), 500))
	}
	return errResult("failed", k.text(ctx, err.Error(), 500))
}

// companyOf is the Company whose API t calls, nil for the agent's own
// tools.
func (k *Toolkit) companyOf(t *Tool) *company {
	if t == nil || t.Domain == "" {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.comps[t.Domain]
}

// result marshals v for the model with every secret the Sessions hold and
// every JWS-shaped string replaced (PA-4.8-08): scrubbed before it is cut
// to max bytes (0: not cut), so that no cut leaves part of a secret. A cut
// result is {"truncated": true, "partial": …}.
func (k *Toolkit) result(ctx context.Context, v any, max int) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("llmtools: encoding result: %w", err)
	}
	s := k.scrub(ctx, string(b))
	if max > 0 && len(s) > max {
		short, err := json.Marshal(map[string]any{"truncated": true, "partial": strings.ToValidUTF8(s[:max/2], "")})
		if err != nil {
			return nil, fmt.Errorf("llmtools: encoding result: %w", err)
		}
		s = string(short)
	}
	return json.RawMessage(s), nil
}

// scrub replaces in s every secret the Sessions hold, whole or the part a
// cut left of one, and every JWS-shaped string (Account Tokens, DPoP
// proofs), found in s as it is and as a JSON decoder reads it: the model
// reads a Company's JSON decoded, so "\u0051…" is found as "Q…"
// (internal/redact).
func (k *Toolkit) scrub(ctx context.Context, s string) string {
	k.mu.Lock()
	sessions := make([]*poppy.Session, 0, len(k.comps))
	for _, c := range k.comps {
		sessions = append(sessions, c.sess)
	}
	k.mu.Unlock()
	return redact.JWS(redactAll(ctx, s, sessions...))
}

// scrubWith is scrub with sess among the Sessions, for a Company's text
// read before the Company is added.
func (k *Toolkit) scrubWith(ctx context.Context, sess *poppy.Session, s string) string {
	return k.scrub(ctx, redactAll(ctx, s, sess))
}

func redactAll(ctx context.Context, s string, sessions ...*poppy.Session) string {
	for _, sess := range sessions {
		s = sess.Redact(ctx, s)
	}
	return s
}

// text is Company or error text for a model: scrubbed first, then made
// plain and cut to max bytes, so that the cut never leaves part of a
// secret.
func (k *Toolkit) text(ctx context.Context, s string, max int) string {
	return plain(k.scrub(ctx, s), max)
}

// plain is Company or error text made safe for a model and a terminal
// (internal/companytext): nothing that could drive a terminal or reorder
// or hide text, at most max bytes, valid UTF-8.
func plain(s string, max int) string { return companytext.Text(s, max) }
