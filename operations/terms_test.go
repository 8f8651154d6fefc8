package operations

// The terms reader against a second, independent one: encoding/json's
// tokenizer. Wherever the SDK's reader says terms read one
// way, encoding/json must read the same tree, the same terms, and no
// duplicate name or colliding path; wherever encoding/json sees a
// duplicate, a collision or invalid UTF-8, the SDK's reader must say the
// terms can be read more than one way.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// tokenTree decodes b with encoding/json's Token walk: the tree (numbers
// as json.Number), whether some object names a member twice, and the
// deepest nesting.
func tokenTree(b []byte) (tree any, dup bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var read func() (any, error)
	read = func() (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				m := map[string]any{}
				for dec.More() {
					k, err := dec.Token()
					if err != nil {
						return nil, err
					}
					name := k.(string)
					v, err := read()
					if err != nil {
						return nil, err
					}
					if _, ok := m[name]; ok {
						dup = true
					}
					m[name] = v
				}
				_, err := dec.Token() // }
				return m, err
			case '[':
				a := []any{}
				for dec.More() {
					v, err := read()
					if err != nil {
						return nil, err
					}
					a = append(a, v)
				}
				_, err := dec.Token() // ]
				return a, err
			}
			return nil, errors.New("unexpected delimiter")
		}
		return tok, nil
	}
	tree, err = read()
	if err != nil {
		return nil, false, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false, errors.New("data after the value")
	}
	return tree, dup, nil
}

// tokenLeaves lists the terms of a tree by path (each path as JSON), and
// reports whether two places join to one dotted string.
func tokenLeaves(tree any) (leaves map[string]string, collide bool) {
	leaves = map[string]string{}
	joined := map[string]bool{}
	var walk func(path []string, segs []string, v any, inArray bool)
	walk = func(path, segs []string, v any, inArray bool) {
		if len(segs) > 0 {
			k := strings.Join(segs, ".")
			if joined[k] {
				collide = true
			}
			joined[k] = true
		}
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 && !inArray && len(path) > 0 {
				pb, _ := json.Marshal(path)
				leaves[string(pb)] = "{}"
			}
			for k, kid := range x {
				next := path
				if !inArray {
					next = append(slices.Clone(path), k)
				}
				walk(next, append(slices.Clone(segs), k), kid, inArray)
			}
		case []any:
			if !inArray {
				pb, _ := json.Marshal(path)
				vb, _ := json.Marshal(x)
				leaves[string(pb)] = string(vb)
			}
			for i, kid := range x {
				walk(path, append(slices.Clone(segs), strconv.Itoa(i)), kid, true)
			}
		default:
			if !inArray {
				pb, _ := json.Marshal(path)
				vb, _ := json.Marshal(x)
				leaves[string(pb)] = string(vb)
			}
		}
	}
	walk(nil, nil, tree, false)
	return leaves, collide
}

// decimalRE is the decimal grammar, written again as a regular expression.
var decimalRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)

func FuzzTermsReading(f *testing.F) {
	for _, s := range []string{
		`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`,
		`{"total": {"amount": "9999.00", "currency": "USD"}, "total.amount": "1.00"}`,
		`{"amount":"9999.00","amount":"1.00"}`,
		`{"a":{"b":[{"c":1,"c":2}]}}`,
		`{"amount":"1.00","am\u006funt":"9999.00"}`,
		`{"amount":"0x10","b":"0b101","c":"0o17","d":"0x1p4","e":1e2,"f":-0.50}`,
		`{"s":"\ud800","t":"\ud83d\ude00","u":"\u0000"}`,
		"{\"a\xff\":1,\"a\xfe\":2}",
		`{"a":[1],"a.0":2}`,
		`{"":{"":1},".":2}`,
		`{"a":{}, "b":[], "c":null, "d":true, "e":false, "f":"\"\\\/\b\f\n\r\t"}`,
		`{"deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"a":1}x`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`, `[1]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxTermsLen {
			return
		}
		r, err := readTerms(b)
		// Syntax: the two readers agree on what is a JSON object.
		object := json.Valid(b) && bytes.TrimLeft(b, " \t\r\n")[0] == '{'
		if (err == nil) != object {
			t.Fatalf("readTerms: %v; encoding/json: valid object %v", err, object)
		}
		if err != nil {
			return
		}
		tree, dup, terr := tokenTree(b)
		if terr != nil {
			t.Fatalf("encoding/json's tokenizer: %v", terr)
		}
		leaves, collide := tokenLeaves(tree)
		if dup || collide || !utf8.Valid(b) {
			if r.amb == nil {
				t.Fatalf("encoding/json sees duplicates %v, collisions %v, valid UTF-8 %v; readTerms one reading", dup, collide, utf8.Valid(b))
			}
		}
		// Every number leaf and string: the decimal grammar, twice.
		var check func(v *value)
		check = func(v *value) {
			if v.kind == 'n' || v.kind == 's' {
				_, ok := decimalNumber(v.s)
				if want := decimalRE.MatchString(v.s) && len(v.s) <= maxDecimalLen; ok != want {
					t.Fatalf("decimalNumber(%q) = %v, the grammar says %v", v.s, ok, want)
				}
			}
			for i := range v.kids {
				check(&v.kids[i])
			}
		}
		check(&r.root)
		if r.amb != nil {
			return
		}
		// One reading: the same tree, the same terms.
		if got := r.root.decoded(); !reflect.DeepEqual(got, tree) {
			t.Fatalf("trees differ:\nreadTerms    %#v\nencoding/json %#v", got, tree)
		}
		mine := map[string]string{}
		r.leaves(func(p Path, v *value) bool {
			pb, _ := json.Marshal([]string(p))
			d, _ := json.Marshal(v.decoded())
			if _, ok := mine[string(pb)]; ok {
				t.Fatalf("term %s twice", pb)
			}
			mine[string(pb)] = string(d)
			return true
		})
		if !reflect.DeepEqual(mine, leaves) {
			t.Fatalf("terms differ:\nreadTerms    %v\nencoding/json %v", mine, leaves)
		}
		// The canonical encoding reads back as the same tree, to both
		// readers, and is its own canonical encoding.
		canon, ok := canonicalTerms(b)
		if !ok {
			t.Fatal("no canonical encoding")
		}
		back, dup2, err := tokenTree(canon)
		if err != nil || dup2 || !reflect.DeepEqual(back, tree) {
			t.Fatalf("canonical %s reads back as %#v (%v)", canon, back, err)
		}
		if m, err := json.Marshal(canon); err != nil || !bytes.Equal(m, canon) {
			t.Fatalf("json.Marshal changes the canonical %s to %s (%v)", canon, m, err)
		}
		again, ok := canonicalTerms(canon)
		if !ok || !bytes.Equal(again, canon) {
			t.Fatalf("canonical %s is not stable: %s", canon, again)
		}
		if termsKey(b) != termsKey(canon) {
			t.Fatal("termsKey differs between the terms and their canonical encoding")
		}
	})
}

func TestPathForms(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Path
		out  string
	}{
		{"price_difference.amount", Path{"price_difference", "amount"}, "price_difference.amount"},
		{"order_id", Path{"order_id"}, "order_id"},
		{"/total.amount", Path{"total.amount"}, "/total.amount"},
		{"/a~1b/~0c", Path{"a/b", "~c"}, "a/b.~c"},
		{"/~1a/b", Path{"/a", "b"}, "/~1a/b"},
		{"/", Path{""}, "/"},
		{"/a/b", Path{"a", "b"}, "a.b"},
	} {
		p, err := ParsePath(c.in)
		if err != nil || !p.Equal(c.want) || p.String() != c.out {
			t.Errorf("ParsePath(%q) = %q %v, String %q", c.in, p, err, p.String())
		}
		if q, err := ParsePath(p.String()); err != nil || !q.Equal(p) {
			t.Errorf("%q does not read back: %q %v", p.String(), q, err)
		}
	}
	for _, bad := range []string{"", "a..b", ".a", "a.", "/a~2", "/a~"} {
		if p, err := ParsePath(bad); err == nil {
			t.Errorf("ParsePath(%q) = %q", bad, p)
		}
	}
	// JSON: an array; a stored string is split at every ".".
	b, _ := json.Marshal(Term{Path: Path{"total.amount"}, Op: OpAny})
	if string(b) != `{"path":["total.amount"],"op":"any"}` {
		t.Errorf("Term JSON %s", b)
	}
	var tm Term
	if err := json.Unmarshal([]byte(`{"path":"total.amount","op":"any"}`), &tm); err != nil || !tm.Path.Equal(Path{"total", "amount"}) {
		t.Errorf("stored dotted path: %q %v", tm.Path, err)
	}
	if err := json.Unmarshal([]byte(`{"path":"total..amount","op":"any"}`), &tm); err == nil {
		t.Error("a stored dotted path with an empty name was read")
	}
}
