package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	ms, err := scan(dir)
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

// docs/conformance.md is what the generator writes now.
func TestDocUpToDate(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, unknown, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range unknown {
		t.Errorf("%s names %s, which is not a rule", u.test, u.id)
	}
	cur, err := os.ReadFile(filepath.Join(root, "docs", "conformance.md"))
	if err != nil || !bytes.Equal(cur, doc) {
		t.Fatalf("docs/conformance.md is stale (%v): run go generate github.com/poppyproto/poppy", err)
	}
	if !strings.Contains(string(doc), "| "+rid("PA~4.2~16")+" |") {
		t.Fatal("the document lacks PA~4.2~16")
	}
}
