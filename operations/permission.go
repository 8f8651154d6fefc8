package operations

// Standing permissions (OPS 5.1).
//
// A Permission is what the User said earlier, such as "exchange for a
// different size if it costs under $20". It applies to an operation only
// when it names the Company (issuer), the account (the label of the Account
// Token the Session is signed in with, A-34) and the action (the channel
// that proposed it), is still in effect, and covers every term of the
// revision with an explicit predicate. The matcher below is plain code:
// each term of the operation is a path (price_difference.amount) that must
// be covered by a predicate of the permission, and each predicate must
// hold; the first failure names the term. An operation without terms is
// never covered (A-34: "every term" can't be checked by machine), nor one
// with user_approval_required.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"time"
)

// Action names what proposed an operation: the channel and, within it, the
// endpoint, tool or conversation. A standing permission covers one Action.
type Action struct {
	// Channel is "openapi", "mcp" or "conversation".
	Channel string `json:"channel"`
	// Name is the OpenAPI "METHOD /path/{template}", the MCP tool name, or
	// "" for any conversation.
	Name string `json:"name,omitempty"`
}

// OpenAPIAction is the action of an OpenAPI endpoint: method and path
// template, such as OpenAPIAction("POST", "/orders/{id}/exchanges").
func OpenAPIAction(method, pathTemplate string) Action {
	return Action{Channel: "openapi", Name: strings.ToUpper(method) + " " + pathTemplate}
}

// ToolAction is the action of an MCP tool.
func ToolAction(name string) Action { return Action{Channel: "mcp", Name: name} }

// ConversationAction is the action of an operation proposed in a
// conversation.
func ConversationAction() Action { return Action{Channel: "conversation"} }

func (a Action) String() string {
	if a.Name == "" {
		return a.Channel
	}
	return a.Channel + " " + a.Name
}

// Op is a predicate's comparison.
type Op string

// The predicates a term can be held to.
const (
	OpAny     Op = "any"      // any value (the subtree at Path is covered)
	OpEqual   Op = "eq"       // equal to Values[0] (JSON equality)
	OpIn      Op = "in"       // equal to one of Values
	OpAtMost  Op = "at_most"  // a decimal number (JSON number or string) ≤ Values[0]
	OpAtLeast Op = "at_least" // a decimal number ≥ Values[0]
)

// Term is one predicate of a permission on one term of an operation.
type Term struct {
	// Path is the term's key, with "." between the keys of nested
	// objects: "price_difference.amount".
	Path string `json:"path"`
	// Op is the comparison.
	Op Op `json:"op"`
	// Values are JSON values: for eq and in, what the term may equal; for
	// at_most and at_least, one decimal number, as a JSON string or
	// number ("20.00" or 20).
	Values []json.RawMessage `json:"values,omitempty"`
}

// AnyValue covers the term (or subtree) at path with any value.
func AnyValue(path string) Term { return Term{Path: path, Op: OpAny} }

// Equal covers the term at path when it equals v.
func Equal(path string, v any) Term {
	return Term{Path: path, Op: OpEqual, Values: []json.RawMessage{mustJSON(v)}}
}

// OneOf covers the term at path when it equals one of vs.
func OneOf[T any](path string, vs ...T) Term {
	t := Term{Path: path, Op: OpIn}
	for _, v := range vs {
		t.Values = append(t.Values, mustJSON(v))
	}
	return t
}

// AtMost covers the term at path when it is a decimal number no greater
// than max ("20.00").
func AtMost(path, max string) Term {
	return Term{Path: path, Op: OpAtMost, Values: []json.RawMessage{mustJSON(max)}}
}

// AtLeast covers the term at path when it is a decimal number no less than
// min.
func AtLeast(path, min string) Term {
	return Term{Path: path, Op: OpAtLeast, Values: []json.RawMessage{mustJSON(min)}}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("operations: predicate value %T is not JSON: %v", v, err))
	}
	return b
}

// Permission is a standing permission the User gave (OPS 5.1). It is kept
// in the keystore (Client.Grant), listed (Client.Permissions) and revoked
// (Client.Revoke).
type Permission struct {
	// ID names the permission; Grant picks one when empty.
	ID string `json:"id"`
	// Issuer is the Company's auth.issuer. Grant fills it in when empty.
	Issuer string `json:"issuer"`
	// Account is the label of the Account Token the Session must be signed
	// in with. Required: an operation of a signed-out Session is
	// never covered by a standing permission.
	Account string `json:"account"`
	// Action is the channel and endpoint, tool or conversation.
	Action Action `json:"action"`
	// Terms must cover every term of a revision, each predicate holding.
	Terms []Term `json:"terms"`
	// Expires is when the permission stops. Required.
	Expires time.Time `json:"expires"`
	// Description is the User's own words, for listing.
	Description string `json:"description,omitempty"`
	// Granted is when the User gave it.
	Granted time.Time `json:"granted"`
}

// Subject is what a permission is checked against.
type Subject struct {
	Issuer    string
	Account   string // "" when the Session is signed out
	Action    Action
	Operation *Operation
	Now       time.Time
}

// MismatchError says why a permission doesn't cover an operation: which
// term, or which of issuer, account, action or expiry, failed.
type MismatchError struct {
	Permission string
	// Term is the term's path, or "" when the failure isn't about a term.
	Term string
	// Reason is a short explanation.
	Reason string
}

func (e *MismatchError) Error() string {
	if e.Term != "" {
		return fmt.Sprintf("operations: permission %s does not cover term %q: %s", e.Permission, e.Term, e.Reason)
	}
	return fmt.Sprintf("operations: permission %s does not apply: %s", e.Permission, e.Reason)
}

// Check reports whether p covers sub: nil when it does, else a
// *MismatchError naming what failed (PA-OPS5-06..10).
func (p *Permission) Check(sub Subject) error {
	fail := func(term, format string, args ...any) error {
		return &MismatchError{Permission: p.ID, Term: term, Reason: fmt.Sprintf(format, args...)}
	}
	op := sub.Operation
	switch {
	case op == nil:
		return fail("", "no operation")
	case p.Issuer == "" || p.Issuer != sub.Issuer:
		return fail("", "it is for another Company") // PA-OPS5-06
	case p.Account == "" || sub.Account == "" || p.Account != sub.Account:
		return fail("", "it is for another account, or the Session is signed out") // PA-OPS5-07
	case p.Action != sub.Action:
		return fail("", "it is for %s, not %s", p.Action, sub.Action) // PA-OPS5-08
	case p.Expires.IsZero() || !sub.Now.Before(p.Expires):
		return fail("", "it expired") // PA-OPS5-10
	case op.UserApprovalRequired:
		return fail("", "the Company requires the User's own approval") // PA-OPS5-05
	case op.Terms == nil:
		return fail("", "the operation has no terms to check") // PA-OPS5-09, A-34
	}
	var terms map[string]any
	dec := json.NewDecoder(bytes.NewReader(op.Terms))
	dec.UseNumber()
	if dec.Decode(&terms) != nil {
		return fail("", "the terms are not an object")
	}
	leaves := map[string]any{}
	flatten("", terms, leaves)
	paths := make([]string, 0, len(leaves))
	for k := range leaves {
		paths = append(paths, k)
	}
	sort.Strings(paths)
	// Every predicate must hold on a term that exists.
	for _, t := range p.Terms {
		if t.Op == OpAny {
			if _, ok := lookup(terms, t.Path); !ok {
				return fail(t.Path, "the operation has no such term")
			}
			continue
		}
		v, ok := leaves[t.Path]
		if !ok {
			return fail(t.Path, "the operation has no such term, or it is an object")
		}
		if err := t.holds(v); err != "" {
			return fail(t.Path, "%s", err)
		}
	}
	// Every term must be covered.
	for _, path := range paths {
		if !slices.ContainsFunc(p.Terms, func(t Term) bool { return t.covers(path) }) {
			return fail(path, "no predicate covers it") // PA-OPS5-09
		}
	}
	return nil
}

func (t Term) covers(path string) bool {
	if t.Path == path {
		return true
	}
	return t.Op == OpAny && strings.HasPrefix(path, t.Path+".")
}

// holds checks the predicate on a leaf value; "" when it holds.
func (t Term) holds(v any) string {
	switch t.Op {
	case OpEqual, OpIn:
		if t.Op == OpEqual && len(t.Values) != 1 || len(t.Values) == 0 {
			return "the predicate has no value"
		}
		got := canonical(v)
		for _, want := range t.Values {
			var w any
			d := json.NewDecoder(bytes.NewReader(want))
			d.UseNumber()
			if d.Decode(&w) == nil && canonical(w) == got {
				return ""
			}
		}
		return fmt.Sprintf("%s is not allowed", clean(got, 80))
	case OpAtMost, OpAtLeast:
		if len(t.Values) != 1 {
			return "the predicate has no bound"
		}
		var bound any
		d := json.NewDecoder(bytes.NewReader(t.Values[0]))
		d.UseNumber()
		if d.Decode(&bound) != nil {
			return "the bound is not JSON"
		}
		b, ok1 := decimal(bound)
		x, ok2 := decimal(v)
		if !ok1 {
			return "the bound is not a decimal number"
		}
		if !ok2 {
			return fmt.Sprintf("%s is not a decimal number", clean(canonical(v), 80))
		}
		c := x.Cmp(b)
		if t.Op == OpAtMost && c > 0 {
			return fmt.Sprintf("%s is more than %s", x.FloatString(2), b.FloatString(2))
		}
		if t.Op == OpAtLeast && c < 0 {
			return fmt.Sprintf("%s is less than %s", x.FloatString(2), b.FloatString(2))
		}
		return ""
	}
	return fmt.Sprintf("unknown predicate %q", t.Op)
}

// decimal reads a JSON number or a string holding a plain decimal number
// ("70.00", "-3", "1e2" is refused).
func decimal(v any) (*big.Rat, bool) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return nil, false
	}
	if s == "" || len(s) > 40 || strings.ContainsAny(s, "eE/ ") {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

func canonical(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// flatten lists the leaves of an object by dotted path; an empty object is
// a leaf of its own.
func flatten(prefix string, m map[string]any, out map[string]any) {
	if len(m) == 0 && prefix != "" {
		out[prefix] = m
	}
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			flatten(p, sub, out)
			continue
		}
		out[p] = v
	}
}

func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = o[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}
