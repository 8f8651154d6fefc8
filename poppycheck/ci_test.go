package poppycheck_test

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/rules"
	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// noSuchRule has the shape of a rule ID but names none (written in two
// pieces, so that tools that count the IDs tests name don't count it).
const noSuchRule = "CO-5-" + "99"

// ciReport is a report of three rules: one failed, one passed, one not
// observed.
func ciReport() *poppycheck.Report {
	return &poppycheck.Report{Domain: "example.test", Results: []poppycheck.Result{
		{Rule: "CO-5-17", Section: "5 Web browsing", Text: "The cookie is SameSite Lax or None, never Strict.", Status: poppycheck.Failed, Step: "browser session",
			Detail: `cookie "s": SameSite Strict`, Evidence: &poppycheck.Exchange{Method: "POST", URL: "https://example.test/poppy/browser-session", Status: 303}},
		{Rule: "CO-5-16", Section: "5 Web browsing", Text: "The cookie is Secure and HttpOnly.", Status: poppycheck.Passed, Detail: "Secure true, HttpOnly true"},
		{Rule: "CO-7.9-01", Section: "7.9 Handoff", Text: "A handoff answers 202 queued.", Status: poppycheck.NotObserved, Reason: "needs a person"},
	}}
}

// TestBaseline: a failure the baseline lists is expected, one it doesn't
// list fails the run, a listed rule that passed is stale and fails it too
// (so a baseline only shrinks), a listed rule not observed is neither, and
// a line that names no Company rule is refused.
func TestBaseline(t *testing.T) {
	for _, c := range []struct {
		text                    string
		failed, expected, stale string
		ok                      bool
	}{
		{text: "", failed: "CO-5-17"},
		{text: "# known\nCO-5-17   # SameSite Strict until the next release\n", expected: "CO-5-17", ok: true},
		{text: "CO-5-17\nCO-5-16\nCO-7.9-01\n", expected: "CO-5-17", stale: "CO-5-16"},
	} {
		b, err := poppycheck.ParseBaseline(strings.NewReader(c.text))
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		v := ciReport().Judge(b)
		if strings.Join(v.Failed, " ") != c.failed || strings.Join(v.Expected, " ") != c.expected || strings.Join(v.Stale, " ") != c.stale || v.OK() != c.ok {
			t.Errorf("%q: %+v, OK %v", c.text, v, v.OK())
		}
	}
	for _, bad := range []string{noSuchRule + "\n", "PA-4.3-02\n", "CO-5-17 CO-5-16\n"} {
		if _, err := poppycheck.ParseBaseline(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// TestJUnit: one test case per rule in a suite per section; a failure
// carries what was seen and the request; a rule not observed is skipped;
// with a baseline an expected failure is skipped and a stale entry fails.
func TestJUnit(t *testing.T) {
	type tc struct {
		Name    string `xml:"name,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
			Text    string `xml:",chardata"`
		} `xml:"failure"`
		Skipped *struct {
			Message string `xml:"message,attr"`
		} `xml:"skipped"`
	}
	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Skipped  int `xml:"skipped,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []tc   `xml:"testcase"`
		} `xml:"testsuite"`
	}
	read := func(b *poppycheck.Baseline) map[string]tc {
		var buf bytes.Buffer
		if err := ciReport().WriteJUnit(&buf, b); err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("%v\n%s", err, buf.String())
		}
		out := map[string]tc{}
		for _, s := range doc.Suites {
			for _, c := range s.Cases {
				out[strings.Fields(c.Name)[0]] = c
			}
		}
		return out
	}
	cases := read(nil)
	if len(doc.Suites) != 2 || doc.Tests != 3 || doc.Failures != 1 || doc.Skipped != 1 {
		t.Errorf("%d suites, %d tests, %d failures, %d skipped", len(doc.Suites), doc.Tests, doc.Failures, doc.Skipped)
	}
	if f := cases["CO-5-17"].Failure; f == nil || !strings.Contains(f.Message, "SameSite Strict") || !strings.Contains(f.Text, "POST https://example.test/poppy/browser-session") {
		t.Errorf("CO-5-17: %+v", cases["CO-5-17"])
	}
	if c := cases["CO-5-16"]; c.Failure != nil || c.Skipped != nil {
		t.Errorf("CO-5-16: %+v", c)
	}
	if s := cases["CO-7.9-01"].Skipped; s == nil || !strings.Contains(s.Message, "needs a person") {
		t.Errorf("CO-7.9-01: %+v", cases["CO-7.9-01"])
	}
	b, _ := poppycheck.ParseBaseline(strings.NewReader("CO-5-17\nCO-5-16\n"))
	cases = read(b)
	if s := cases["CO-5-17"].Skipped; s == nil || !strings.Contains(s.Message, "expected failure") {
		t.Errorf("CO-5-17 with the baseline: %+v", cases["CO-5-17"])
	}
	if f := cases["CO-5-16"].Failure; f == nil || !strings.Contains(f.Message, "stale") {
		t.Errorf("CO-5-16 with the baseline: %+v", cases["CO-5-16"])
	}
}

// TestOnly: Options.Only keeps in the report the rules and sections it
// names, and CheckOnly refuses a name that selects nothing.
func TestOnly(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	rep := runWith(t, srv, &poppycheck.Options{Only: []string{"CO-5-17", "7.5"}})
	n75 := 0
	for _, r := range rules.All() {
		if strings.HasPrefix(r.ID, "CO-7.5-") && !r.Withdrawn {
			n75++
		}
	}
	if len(rep.Results) != 1+n75 {
		t.Errorf("%d results, want %d", len(rep.Results), 1+n75)
	}
	for _, r := range rep.Results {
		if r.Rule != "CO-5-17" && !strings.HasPrefix(r.Rule, "CO-7.5-") {
			t.Errorf("%s is in the report", r.Rule)
		}
	}
	if f := rep.Failed(); len(f) != 1 || f[0].Rule != "CO-5-17" {
		t.Errorf("failed %v", f)
	}
	if err := poppycheck.CheckOnly([]string{"OPS6", "co-4.3", "CO-4.3-02"}); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{noSuchRule, "8.1", "PA-4.3-02"} {
		if poppycheck.CheckOnly([]string{bad}) == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
