package poppycheck

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/poppyproto/poppy/internal/termtext"
)

// WriteTable writes the report for people: one line per Company rule
// (status, step, what was seen or why it wasn't), then each failure with
// the rule's text, the request and the answer, then the notes and a
// summary. Text from the Company is escaped, so it can't drive a
// terminal; secrets appear only as fingerprints.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	if r.OtherVersion != "" {
		// One line, not a table of rules that don't apply.
		fmt.Fprintf(ew, "poppy check %s: %s\n", esc(r.Domain), esc(r.Aborted))
		return ew.err
	}
	fmt.Fprintf(ew, "poppy check %s (agent %s%s)\n\n", esc(r.Domain), esc(r.ClientID), map[bool]string{true: ", interactive"}[r.Interactive])
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSTATUS\tSTEP\tSEEN")
	for _, x := range r.Results {
		seen := x.Detail
		if x.Status == NotObserved {
			seen = x.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Rule, x.Status, esc(x.Step), esc(clip(seen, 160)))
	}
	tw.Flush()
	for _, x := range r.Failed() {
		fmt.Fprintf(ew, "\nFAILED %s: %s\n", x.Rule, x.Text)
		fmt.Fprintf(ew, "  step: %s\n  seen: %s\n", esc(x.Step), esc(x.Detail))
		if e := x.Evidence; e != nil {
			fmt.Fprintf(ew, "  request: %s %s\n", e.Method, esc(e.URL))
			writeHeaders(ew, "           ", e.RequestHeader)
			if e.RequestBody != "" {
				fmt.Fprintf(ew, "           %s\n", esc(clip(e.RequestBody, 600)))
			}
			for _, sj := range e.Signed {
				fmt.Fprintf(ew, "           %s: %s\n", esc(sj.Where), esc(clip(signedText(sj), 600)))
			}
			if e.Error != "" {
				fmt.Fprintf(ew, "  answer:  none (%s)\n", esc(e.Error))
			} else {
				fmt.Fprintf(ew, "  answer:  %d\n", e.Status)
				writeHeaders(ew, "           ", e.ResponseHeader)
				if e.ResponseBody != "" {
					fmt.Fprintf(ew, "           %s\n", esc(clip(e.ResponseBody, 600)))
				}
			}
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(ew, "\nNotes:")
		for _, n := range r.Notes {
			fmt.Fprintf(ew, "  - %s\n", esc(n))
		}
	}
	if r.Aborted != "" {
		fmt.Fprintf(ew, "\nStopped early: %s\n", esc(r.Aborted))
	}
	fmt.Fprintf(ew, "\n%d passed, %d failed, %d not observed; %d requests in %v.\n",
		r.Count(Passed), r.Count(Failed), r.Count(NotObserved), r.Requests, r.Duration.Round(time.Millisecond))
	return ew.err
}

// signedText shows a JWT the check sent: its header and claims as JSON.
func signedText(s Signed) string {
	h, _ := json.Marshal(s.Header)
	c, _ := json.Marshal(s.Claims)
	return "header " + string(h) + ", claims " + string(c)
}

func writeHeaders(w io.Writer, indent string, h map[string]string) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s%s: %s\n", indent, esc(k), esc(clip(h[k], 300)))
	}
}

func esc(s string) string { return termtext.Escape(s) }

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return len(b), nil
	}
	_, e.err = e.w.Write(b)
	return len(b), nil
}
