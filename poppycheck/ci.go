package poppycheck

// For a CI: a baseline of expected failures, whose entries that now pass
// fail the run as stale (so a baseline only shrinks, as h2spec's and the
// MCP conformance suite's do), and a JUnit report.

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Baseline lists the Company rules a Company is known to fail: a CI adopts
// the check before every failure is fixed, and the run fails only on a
// failure the baseline doesn't list, or on a listed rule that now passes
// (stale: remove it). Its text form is one rule ID a line; "#" starts a
// comment, to the end of the line.
type Baseline struct {
	rules []string
}

// ParseBaseline reads a baseline. A line that names no Company rule is an
// error, so that a typo doesn't hide a failure.
func ParseBaseline(r io.Reader) (*Baseline, error) {
	b := &Baseline{}
	known := map[string]bool{}
	for _, x := range coRules() {
		known[x.ID] = true
	}
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		id := strings.TrimSpace(line)
		switch {
		case id == "":
		case !known[id]:
			return nil, fmt.Errorf("poppycheck: baseline line %d: %q is not a Company rule (such as CO-4.3-02)", n, id)
		case !slices.Contains(b.rules, id):
			b.rules = append(b.rules, id)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("poppycheck: reading the baseline: %w", err)
	}
	return b, nil
}

// Rules returns the rules the baseline lists.
func (b *Baseline) Rules() []string {
	if b == nil {
		return nil
	}
	return slices.Clone(b.rules)
}

func (b *Baseline) has(id string) bool { return b != nil && slices.Contains(b.rules, id) }

// Verdict is what a run means for a CI, given a baseline.
type Verdict struct {
	// Failed are the failures the baseline doesn't list.
	Failed []string `json:"failed,omitempty"`
	// Expected are the failures it lists.
	Expected []string `json:"expected,omitempty"`
	// Stale are the rules it lists that passed: the Company keeps them
	// now, and the baseline must drop them.
	Stale []string `json:"stale,omitempty"`
}

// OK reports a run a CI passes: no failure the baseline doesn't list, and
// no stale entry.
func (v Verdict) OK() bool { return len(v.Failed) == 0 && len(v.Stale) == 0 }

// Judge compares the report with b (nil: no baseline). A listed rule the
// run didn't observe is neither stale nor failed; one the report doesn't
// hold (Options.Only) is ignored.
func (r *Report) Judge(b *Baseline) Verdict {
	var v Verdict
	for _, x := range r.Results {
		switch {
		case x.Status == Failed && b.has(x.Rule):
			v.Expected = append(v.Expected, x.Rule)
		case x.Status == Failed:
			v.Failed = append(v.Failed, x.Rule)
		case x.Status == Passed && b.has(x.Rule):
			v.Stale = append(v.Stale, x.Rule)
		}
	}
	return v
}

// The JUnit XML shapes (the schema Jenkins, GitLab and GitHub's reporters
// read).
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Skipped  int          `xml:"skipped,attr"`
		Time     string       `xml:"time,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name      string      `xml:"name,attr"`
		Tests     int         `xml:"tests,attr"`
		Failures  int         `xml:"failures,attr"`
		Skipped   int         `xml:"skipped,attr"`
		Timestamp string      `xml:"timestamp,attr,omitempty"`
		Cases     []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Failure   *junitMessage `xml:"failure,omitempty"`
		Skipped   *junitMessage `xml:"skipped,omitempty"`
	}
	junitMessage struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
)

// WriteJUnit writes the report as JUnit XML: a test suite per section of
// the spec, a test case per rule ("CO-4.3-02 The proof's signature must
// verify…"). A failed rule is a failure (with what was seen, the request
// and the answer), a rule not observed is skipped (with why). With a
// baseline b, a failure it lists is skipped as expected, and a rule it
// lists that passed is a failure: a stale entry.
func (r *Report) WriteJUnit(w io.Writer, b *Baseline) error {
	out := junitSuites{Name: "poppy check " + r.Domain, Time: fmt.Sprintf("%.3f", r.Duration.Seconds())}
	idx := map[string]int{}
	for _, x := range r.Results {
		i, ok := idx[x.Section]
		if !ok {
			i = len(out.Suites)
			idx[x.Section] = i
			out.Suites = append(out.Suites, junitSuite{Name: x.Section, Timestamp: r.Started.UTC().Format(time.RFC3339)})
		}
		s := &out.Suites[i]
		c := junitCase{Name: x.Rule + " " + x.Text, Classname: "poppycheck." + strings.Fields(x.Section + " _")[0]}
		switch {
		case x.Status == Failed && b.has(x.Rule):
			c.Skipped = &junitMessage{Message: "expected failure (in the baseline): " + x.Detail}
		case x.Status == Failed:
			c.Failure = &junitMessage{Message: x.Detail, Text: failureText(x)}
		case x.Status == Passed && b.has(x.Rule):
			c.Failure = &junitMessage{Message: "stale baseline entry: the rule passed (" + x.Detail + "); remove it from the baseline"}
		case x.Status == NotObserved:
			c.Skipped = &junitMessage{Message: "not observed: " + x.Reason}
		}
		s.Tests++
		out.Tests++
		if c.Failure != nil {
			s.Failures++
			out.Failures++
		}
		if c.Skipped != nil {
			s.Skipped++
			out.Skipped++
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// failureText is a failure's step, request and answer, as the table shows
// them, for a JUnit failure's body.
func failureText(x Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step: %s\nseen: %s\n", x.Step, x.Detail)
	if e := x.Evidence; e != nil {
		fmt.Fprintf(&b, "request: %s %s\n", e.Method, e.URL)
		writeHeaders(&b, "  ", e.RequestHeader)
		if e.RequestBody != "" {
			fmt.Fprintf(&b, "  %s\n", e.RequestBody)
		}
		for _, sj := range e.Signed {
			fmt.Fprintf(&b, "  %s: %s\n", sj.Where, signedText(sj))
		}
		if e.Error != "" {
			fmt.Fprintf(&b, "answer: none (%s)\n", e.Error)
		} else {
			fmt.Fprintf(&b, "answer: %d\n", e.Status)
			writeHeaders(&b, "  ", e.ResponseHeader)
			if e.ResponseBody != "" {
				fmt.Fprintf(&b, "  %s\n", e.ResponseBody)
			}
		}
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}
