package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// rid spells a rule ID written with "~" for "-", so that the IDs this
// file uses as data don't count as rules its tests show.
func rid(s string) string { return strings.ReplaceAll(s, "~", "-") }

func rids(ss ...string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = rid(s)
	}
	return out
}

func TestNamedIDs(t *testing.T) {
	for name, want := range map[string][]string{
		"TestPA_4_3_02_Proof":               {"PA~4.3~02"},
		"TestPA_3_01_URL":                   {"PA~3~01"},
		"TestPA_3_2_04_PoppyDomains":        {"PA~3.2~04"},
		"TestPA_4_5_05_to_08_CallbackCheck": {"PA~4.5~05", "PA~4.5~06", "PA~4.5~07", "PA~4.5~08"},
		"TestPA_4_6_10_and_11_Expiry":       {"PA~4.6~10", "PA~4.6~11"},
		"TestCO_OPS5_03_TermsChanged":       {"CO~OPS5~03"},
		"TestCO_4_1_05":                     {"CO~4.1~05"},
		"TestDirectAcrossReplicas":          nil,
		"TestPA_4_4_01_and_05_Types":        {"PA~4.4~01", "PA~4.4~05"},
	} {
		if got := namedIDs(name); !slices.Equal(got, rids(want...)) {
			t.Errorf("namedIDs(%s) = %v, want %v", name, got, want)
		}
	}
}

// Comments inside and above a function count for it; a comment between
// functions counts for the next one; IDs in strings don't count.
func TestScanFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644)
	src := `package x

// PA~3~01 above
func TestA(t *testing.T) {
	// PA~3~02 inside
	_ = "PA~3~03"
}

// between: CO~3~01

func helperB() {}

func TestPA_3_04_Name(t *testing.T) {}
`
	os.WriteFile(filepath.Join(dir, "a_test.go"), []byte(rid(src)), 0o644)
	ms, _, err := scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range ms {
		got[m.id] = m.test
	}
	want := map[string]string{
		"PA~3~01": "a_test.go: TestA", "PA~3~02": "a_test.go: TestA",
		"CO~3~01": "a_test.go: helperB", "PA~3~04": "a_test.go: TestPA_3_04_Name",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if k = rid(k); got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

// rules.txt is whole and well-formed: every section has rules, no ID twice.
func TestRules(t *testing.T) {
	secs, byID, err := parseRules(rulesText)
	if err != nil {
		t.Fatal(err)
	}
	if len(byID) < 500 || len(secs) < 30 {
		t.Fatalf("%d rules in %d sections", len(byID), len(secs))
	}
	for _, s := range secs {
		if len(s.rules) == 0 {
			t.Errorf("section %q has no rules", s.title)
		}
	}
}

// A withdrawn rule is listed but not counted, and a test naming it names
// no rule; a rule named only in a string of a test file or in a testdata
// file, where a count of the IDs in the files' text finds it, is reported,
// so the two counts can't drift apart (they did: 297/298 and 258/260 here
// while such a count said 298/298 and 258/258).
func TestCountsAgree(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "testdata"), 0o755)
	src := `package x

// PA~3~01 in a comment, CO~4.3~12 withdrawn
func TestA(t *testing.T) {
	cases := []string{"PA~3~02 in a string only", "PA~3~01"}
	_ = cases
}
`
	os.WriteFile(filepath.Join(dir, "a_test.go"), []byte(rid(src)), 0o644)
	os.WriteFile(filepath.Join(dir, "testdata", "corpus"), []byte(rid("CO~3~01 in testdata")), 0o644)
	doc, unknown, loose, err := generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(unknown) != 1 || unknown[0].id != rid("CO~4.3~12") {
		t.Errorf("unknown = %v, want the withdrawn CO~4.3~12", unknown)
	}
	var got []string
	for _, l := range loose {
		got = append(got, l.id+" in "+l.test)
	}
	if want := rids("CO~3~01 in testdata/corpus", "PA~3~02 in a_test.go"); !slices.Equal(got, want) {
		t.Errorf("named only in strings: %v, want %v", got, want)
	}
	// The summary counts only rules that are not withdrawn.
	secs, _, _ := parseRules(rulesText)
	var pa, co int
	for _, s := range secs {
		for _, r := range s.rules {
			switch {
			case r.withdrawn:
			case strings.HasPrefix(r.id, "PA-"):
				pa++
			default:
				co++
			}
		}
	}
	if !strings.Contains(string(doc), fmt.Sprintf("| All | 1/%d | 0/%d |", pa, co)) {
		t.Errorf("the summary doesn't count %d PA and %d CO rules", pa, co)
	}
	if !strings.Contains(string(doc), "| "+rid("CO~4.3~12")+" | Withdrawn") {
		t.Error("the withdrawn rule is not listed")
	}
}

// docs/conformance.md is what the generator writes now, and no rule is
// named only in a string.
func TestDocUpToDate(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, unknown, loose, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range unknown {
		t.Errorf("%s names %s, which is not a rule", u.test, u.id)
	}
	for _, l := range loose {
		t.Errorf("%s names %s only in a string: name it in the test's name or a comment", l.test, l.id)
	}
	cur, err := os.ReadFile(filepath.Join(root, "docs", "conformance.md"))
	if err != nil || !bytes.Equal(cur, doc) {
		t.Fatalf("docs/conformance.md is stale (%v): run go generate github.com/poppyproto/poppy", err)
	}
	if !strings.Contains(string(doc), "| "+rid("PA~4.2~16")+" |") {
		t.Fatal("the document lacks PA~4.2~16")
	}
}
