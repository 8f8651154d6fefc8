package operations

// Standing permissions (OPS 5.1).
//
// A Permission is what the User said earlier, such as "exchange for a
// different size if it costs under $20". It applies to an operation only
// when it names the Company (issuer), the account (the label of the Account
// Token the Session is signed in with, A-34) and the action (the channel
// that proposed it), is still in effect, and covers every term of the
// revision with an explicit predicate. The matcher below is plain code on
// the one reading of the terms (terms.go): each term of the operation is a
// path (Path{"price_difference", "amount"}) that must be covered by a
// predicate of the permission, and each predicate must hold; the first
// failure names the term. An operation without terms is never covered
// "every term" can't be checked by machine), nor one with
// user_approval_required, nor one whose terms can be read more than one
// way (an *AmbiguousTermsError).

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
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
	// Path is the term's place: the member names from the top of the
	// terms, such as Path{"price_difference", "amount"}. In JSON it is an
	// array of names; a string stored by an earlier version is read as
	// names joined with "." (see Path.UnmarshalJSON).
	Path Path `json:"path"`
	// Op is the comparison.
	Op Op `json:"op"`
	// Values are JSON values: for eq and in, what the term may equal; for
	// at_most and at_least, one decimal number, as a JSON string or
	// number ("20.00" or 20).
	Values []json.RawMessage `json:"values,omitempty"`
}

// AnyValue covers the term (or subtree) at path with any value.
func AnyValue(path Path) Term { return Term{Path: slices.Clone(path), Op: OpAny} }

// Equal covers the term at path when it equals v.
func Equal(path Path, v any) Term {
	return Term{Path: slices.Clone(path), Op: OpEqual, Values: []json.RawMessage{mustJSON(v)}}
}

// OneOf covers the term at path when it equals one of vs.
func OneOf[T any](path Path, vs ...T) Term {
	t := Term{Path: slices.Clone(path), Op: OpIn}
	for _, v := range vs {
		t.Values = append(t.Values, mustJSON(v))
	}
	return t
}

// AtMost covers the term at path when it is a decimal number no greater
// than max ("20.00"). Both are read in the decimal grammar: digits, an
// optional "-" and an optional fraction ("70.00"), never an exponent or
// another base.
func AtMost(path Path, max string) Term {
	return Term{Path: slices.Clone(path), Op: OpAtMost, Values: []json.RawMessage{mustJSON(max)}}
}

// AtLeast covers the term at path when it is a decimal number no less than
// min.
func AtLeast(path Path, min string) Term {
	return Term{Path: slices.Clone(path), Op: OpAtLeast, Values: []json.RawMessage{mustJSON(min)}}
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
	// Term is the term's path, or nil when the failure isn't about one
	// term.
	Term Path
	// Reason is a short explanation.
	Reason string
	// Err is the *AmbiguousTermsError of terms that can be read more than
	// one way, else nil.
	Err error
}

func (e *MismatchError) Error() string {
	if len(e.Term) > 0 {
		return fmt.Sprintf("operations: permission %s does not cover term %q: %s", e.Permission, clean(e.Term.String(), 200), e.Reason)
	}
	return fmt.Sprintf("operations: permission %s does not apply: %s", e.Permission, e.Reason)
}

// Unwrap returns Err.
func (e *MismatchError) Unwrap() error { return e.Err }

// Check reports whether p covers sub: nil when it does, else a
// *MismatchError naming what failed (PA-OPS5-06..10). Terms that can be
// read more than one way are never covered: the error then wraps their
// *AmbiguousTermsError (errors.As).
func (p *Permission) Check(sub Subject) error {
	fail := func(term Path, format string, args ...any) error {
		return &MismatchError{Permission: p.ID, Term: term, Reason: fmt.Sprintf(format, args...)}
	}
	op := sub.Operation
	switch {
	case op == nil:
		return fail(nil, "no operation")
	case p.Issuer == "" || p.Issuer != sub.Issuer:
		return fail(nil, "it is for another Company") // PA-OPS5-06
	case p.Account == "" || sub.Account == "" || p.Account != sub.Account:
		return fail(nil, "it is for another account, or the Session is signed out") // PA-OPS5-07
	case p.Action != sub.Action:
		return fail(nil, "it is for %s, not %s", p.Action, sub.Action) // PA-OPS5-08
	case p.Expires.IsZero() || !sub.Now.Before(p.Expires):
		return fail(nil, "it expired") // PA-OPS5-10
	case op.UserApprovalRequired:
		return fail(nil, "the Company requires the User's own approval") // PA-OPS5-05
	case op.Terms == nil:
		return fail(nil, "the operation has no terms to check") // PA-OPS5-09, A-34
	}
	// The one reading of the terms (terms.go): what the Approver is shown
	// and the journal keeps.
	r, err := readTerms(op.Terms)
	if err != nil {
		return fail(nil, "the terms are not a JSON object")
	}
	if r.amb != nil {
		// Duplicate names, colliding paths, a number outside the decimal
		// grammar: another reader may see other terms than this check.
		return &MismatchError{Permission: p.ID, Term: r.amb.Path, Reason: "the terms can be read more than one way: " + r.amb.Reason, Err: r.amb}
	}
	// Every predicate must hold on a term that exists.
	for _, t := range p.Terms {
		if len(t.Path) == 0 {
			return fail(nil, "a predicate has no path")
		}
		v, ok := r.lookup(t.Path)
		if t.Op == OpAny {
			if !ok {
				return fail(t.Path, "the operation has no such term")
			}
			continue
		}
		if !ok || !v.leaf() {
			return fail(t.Path, "the operation has no such term, or it is an object")
		}
		if err := t.holds(v); err != "" {
			return fail(t.Path, "%s", err)
		}
	}
	// Every term must be covered.
	var uncovered Path
	r.leaves(func(path Path, _ *value) bool {
		if !slices.ContainsFunc(p.Terms, func(t Term) bool { return t.covers(path) }) {
			uncovered = slices.Clone(path)
			return false
		}
		return true
	})
	if uncovered != nil {
		return fail(uncovered, "no predicate covers it") // PA-OPS5-09
	}
	return nil
}

func (t Term) covers(path Path) bool {
	if len(t.Path) == 0 {
		return false
	}
	if t.Op == OpAny {
		return path.within(t.Path)
	}
	return path.Equal(t.Path)
}

// holds checks the predicate on a term's value; "" when it holds. The
// predicate's values are read as the terms are.
func (t Term) holds(v *value) string {
	switch t.Op {
	case OpEqual, OpIn:
		if t.Op == OpEqual && len(t.Values) != 1 || len(t.Values) == 0 {
			return "the predicate has no value"
		}
		got := string(v.encode(nil, true))
		for _, want := range t.Values {
			w, amb, err := readValue(want)
			if err == nil && amb == nil && string(w.encode(nil, true)) == got {
				return ""
			}
		}
		return fmt.Sprintf("%s is not allowed", clean(got, 80))
	case OpAtMost, OpAtLeast:
		if len(t.Values) != 1 {
			return "the predicate has no bound"
		}
		b, ok1 := boundOf(t.Values[0])
		x, ok2 := decimal(v)
		if !ok1 {
			return "the bound is not a decimal number"
		}
		if !ok2 {
			return fmt.Sprintf("%s is not a decimal number", clean(string(v.encode(nil, false)), 80))
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

// boundOf reads a predicate's bound: a decimal number as a JSON string or
// number.
func boundOf(raw json.RawMessage) (*big.Rat, bool) {
	v, amb, err := readValue(raw)
	if err != nil || amb != nil {
		return nil, false
	}
	return decimal(&v)
}

// decimal reads a JSON number, or a string, holding a decimal number in
// the grammar of decimalNumber ("70.00", "-3"; "1e2", "0x10" and " 5" are
// refused).
func decimal(v *value) (*big.Rat, bool) {
	if v.kind != 'n' && v.kind != 's' {
		return nil, false
	}
	return decimalNumber(v.s)
}
