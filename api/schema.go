package api

// JSON Schemas for models ("a JSON Schema of the input that a model
// provider accepts, with $refs resolved and size bounded").
//
// resolveRefs replaces every local "$ref" ("#/…", a JSON pointer into the
// document the schema came from) by a copy of its target, down to a depth
// bound: a recursive schema is cut at that depth to {} (any value), so the
// result is finite. A reference outside the document is never fetched; it
// becomes {} too. A budget of nodes and of string bytes stops a schema that
// would grow exponentially before it is built: each resolution has its own
// (maxSchemaNodes, maxResolvedBytes), and draws on a larger one shared by
// every resolution of one description, so that many schemas that each stay
// within their own bound can't add up (an attack's 23,894 operations, each
// just under the per-schema bound, took minutes and gigabytes). The
// keywords that only served references ($defs, definitions, $id, $schema)
// are dropped. boundSchema then makes the marshalled schema fit a byte
// limit, cutting depth further if it must.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

const (
	maxSchemaDepth   = 10
	maxSchemaNodes   = 20000
	maxResolvedBytes = 1 << 20
	// The budget of one description: every tool built from it and every
	// ResolveSchema call draws on it, and the results are shared.
	maxDescriptionNodes = 1 << 21
	maxDescriptionBytes = 16 << 20
)

// errBudgetSpent: the description's budget for resolving schemas is spent.
var errBudgetSpent = fmt.Errorf("%w: the description's budget for resolving schemas (%d nodes, %d MiB) is spent",
	errSchemaTooLarge, maxDescriptionNodes, maxDescriptionBytes>>20)

// budget is what is left of the work (nodes built, string bytes copied) a
// resolution may do; the zero value allows nothing.
type budget struct {
	nodes, bytes int
}

func (b *budget) spend(nodes, bytes int) error {
	b.nodes -= nodes
	b.bytes -= bytes
	if b.nodes < 0 || b.bytes < 0 {
		return errSchemaTooLarge
	}
	return nil
}

// resolveRefs resolves v against root within a resolution's own bound and
// what is left of shared, which it draws on.
// It returns what it used too.
func resolveRefs(v, root any, depth int, shared *budget) (any, budget, error) {
	own := budget{nodes: min(maxSchemaNodes, shared.nodes), bytes: min(maxResolvedBytes, shared.bytes)}
	start := own
	out, err := resolve(v, root, depth, &own)
	used := budget{nodes: start.nodes - own.nodes, bytes: start.bytes - own.bytes}
	if serr := shared.spend(used.nodes, used.bytes); err == nil {
		err = serr
	}
	return out, used, err
}

// unbounded is a shared budget that never runs out before a resolution's
// own: for a schema that stands alone (an MCP tool's).
func unbounded() *budget { return &budget{nodes: 1 << 62, bytes: 1 << 62} }

func resolve(v, root any, depth int, n *budget) (any, error) {
	if err := n.spend(1, 0); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case string:
		if err := n.spend(0, len(x)); err != nil {
			return nil, err
		}
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			target, ok := pointer(root, ref)
			if !ok || depth <= 0 {
				return map[string]any{}, nil
			}
			t, err := resolve(target, root, depth-1, n)
			if err != nil {
				return nil, err
			}
			if len(x) == 1 {
				return t, nil
			}
			// 3.1 / 2020-12: siblings of $ref apply too.
			out := map[string]any{}
			if tm, ok := t.(map[string]any); ok {
				for k, v := range tm {
					out[k] = v
				}
			}
			for k, sv := range x {
				if k == "$ref" || dropKeyword(k) {
					continue
				}
				r, err := resolve(sv, root, depth, n)
				if err != nil {
					return nil, err
				}
				out[k] = r
			}
			return out, nil
		}
		out := make(map[string]any, len(x))
		for k, sv := range x {
			if dropKeyword(k) {
				continue
			}
			if err := n.spend(0, len(k)); err != nil {
				return nil, err
			}
			r, err := resolve(sv, root, depth, n)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, sv := range x {
			r, err := resolve(sv, root, depth, n)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

func dropKeyword(k string) bool {
	switch k {
	case "$defs", "definitions", "$id", "$schema", "$anchor", "$dynamicAnchor", "$comment":
		return true
	}
	return false
}

// pointer resolves a local JSON pointer reference ("#/a/b") in root.
func pointer(root any, ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#") {
		return nil, false
	}
	frag, err := url.PathUnescape(ref[1:])
	if err != nil {
		return nil, false
	}
	if frag == "" {
		return root, true
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, false // anchors are not followed
	}
	cur := root
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// boundSchema marshals schema (resolved against root, drawing on shared)
// within maxBytes: as it is, or with fewer levels of references expanded,
// or with descriptions dropped, or at last with nested subschemas cut to {}
// level by level, down to the top-level properties accepting any value.
// With v30, OpenAPI 3.0 keywords are converted (from30) once resolved.
func boundSchema(schema, root any, maxBytes int, shared *budget, v30 bool) (json.RawMessage, error) {
	fits := func(v any) (json.RawMessage, bool) {
		b, err := json.Marshal(v)
		return b, err == nil && len(b) <= maxBytes
	}
	var last any
	for _, depth := range []int{maxSchemaDepth, 6, 4, 2, 1} {
		v, used, err := resolveRefs(schema, root, depth, shared)
		if errors.Is(err, errSchemaTooLarge) {
			if shared.nodes <= 0 || shared.bytes <= 0 {
				return nil, errBudgetSpent
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if v30 {
			from30(v)
		}
		if used.nodes/2+used.bytes > maxBytes {
			// Each node built marshals to a byte at least (each "$ref"
			// counted is replaced by a node of its own), each string to
			// its bytes: it can't fit, and marshalling it would be wasted.
			last = v
			continue
		}
		if b, ok := fits(v); ok {
			return b, nil
		}
		last = v
	}
	if last == nil {
		return nil, errSchemaTooLarge
	}
	stripDescriptions(last, true)
	if b, ok := fits(last); ok {
		return b, nil
	}
	for _, levels := range []int{12, 8, 6, 4, 2} {
		v := cutDepth(deepCopy(last), levels)
		if b, ok := fits(v); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: over %d bytes", errSchemaTooLarge, maxBytes)
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, sv := range x {
			out[k] = deepCopy(sv)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, sv := range x {
			out[i] = deepCopy(sv)
		}
		return out
	}
	return v
}

// cutDepth replaces the subschemas below depth levels of nesting by {}.
func cutDepth(v any, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		if depth <= 0 {
			return map[string]any{}
		}
		for k, sv := range x {
			x[k] = cutDepth(sv, depth-1)
		}
	case []any:
		for i, sv := range x {
			x[i] = cutDepth(sv, depth)
		}
	}
	return v
}

// stripDescriptions deletes description, examples and titles, except at
// the top level's properties when keepTop.
func stripDescriptions(v any, keepTop bool) {
	switch x := v.(type) {
	case map[string]any:
		if !keepTop {
			delete(x, "description")
		}
		delete(x, "examples")
		delete(x, "example")
		delete(x, "title")
		for _, sv := range x {
			stripDescriptions(sv, false)
		}
	case []any:
		for _, sv := range x {
			stripDescriptions(sv, false)
		}
	}
}

// from30 rewrites, in place, the OpenAPI 3.0 schema keywords whose meaning
// JSON Schema 2020-12 changed: nullable becomes a "null" type, and boolean
// exclusiveMinimum and exclusiveMaximum become numbers.
func from30(v any) {
	switch x := v.(type) {
	case map[string]any:
		if n, ok := x["nullable"].(bool); ok {
			delete(x, "nullable")
			if n {
				switch t := x["type"].(type) {
				case string:
					x["type"] = []any{t, "null"}
				case []any:
					x["type"] = append(t, "null")
				}
			}
		}
		for _, k := range [][2]string{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
			if b, ok := x[k[0]].(bool); ok {
				delete(x, k[0])
				if lim, has := x[k[1]]; b && has {
					x[k[0]] = lim
					delete(x, k[1])
				}
			}
		}
		for _, sv := range x {
			from30(sv)
		}
	case []any:
		for _, sv := range x {
			from30(sv)
		}
	}
}
