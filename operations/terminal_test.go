package operations_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/operations"
)

// request is an approval request as the Client builds one.
func request(summary string, terms string) *operations.ApprovalRequest {
	r := &operations.ApprovalRequest{Company: "Example Company", Domain: "example.test", OperationID: "exc_1", Revision: 2, Summary: summary}
	if terms != "" {
		r.Terms = []byte(terms)
	}
	return r
}

// A terminal approver approves only on a typed "yes" and declines only on
// a typed "no"; an answer that is neither is asked again, three times in
// all; the end of the input, or three answers that are neither, is no
// answer (ErrNoAnswer), not a decline (OPS 5.1).
func TestTerminalApproverAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, typed string
		want        operations.Decision
		err         error
		asked       int
		left        string // what stays unread after the answer
	}{
		{"yes", "yes\n", operations.Approve, nil, 1, ""},
		{"yes, spaced and in capitals", "  YES \r\n", operations.Approve, nil, 1, ""},
		{"no", "no\n", operations.Decline, nil, 1, ""},
		{"a typo, then yes", "yess\nyes\nno\n", operations.Approve, nil, 2, "no\n"},
		{"a typo, then no", "y\nno\n", operations.Decline, nil, 2, ""},
		{"three typos", "y\nok\nsure\nyes\n", operations.Decline, operations.ErrNoAnswer, 3, "yes\n"},
		{"the end of input", "", operations.Decline, operations.ErrNoAnswer, 1, ""},
		{"a typo, then the end of input", "y\n", operations.Decline, operations.ErrNoAnswer, 2, ""},
		{"yes at the end of input", "yes", operations.Approve, nil, 1, ""},
		{"a line too long, then yes", strings.Repeat("yes", 5000) + "\nyes\n", operations.Approve, nil, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.NewReader(tc.typed)
			var out bytes.Buffer
			d, err := operations.TerminalApprover(&out, in).Approve(context.Background(), request("Exchange the jacket.", ""))
			if d != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("typed %q: %v, %v; want %v, %v", tc.typed, d, err, tc.want, tc.err)
			}
			if n := strings.Count(out.String(), `Type "yes" to approve or "no" to decline: `); n != tc.asked {
				t.Fatalf("asked %d times, want %d:\n%s", n, tc.asked, out.String())
			}
			// The answer is read line by line: what follows it is left
			// for the next reader.
			if left, _ := io.ReadAll(in); string(left) != tc.left {
				t.Fatalf("left %q unread, want %q", left, tc.left)
			}
		})
	}
}

// Input that is a file but not a terminal (here a pipe, as in
// "yes | script") is never read: what a script pipes in can neither
// approve nor decline (PA-OPS5-03: the answer is the User's, typed).
func TestTerminalApproverPipeNeverAnswers(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString("yes\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var out bytes.Buffer
	d, err := operations.TerminalApprover(&out, r).Approve(context.Background(), request("Exchange the jacket.", ""))
	// PA-OPS5-03
	if d == operations.Approve || !errors.Is(err, operations.ErrNoTerminal) || !errors.Is(err, operations.ErrNoAnswer) {
		t.Fatalf("a piped yes: %v, %v", d, err)
	}
	if left, _ := io.ReadAll(r); string(left) != "yes\n" {
		t.Fatalf("the pipe was read: %q left", left)
	}
}

// A context that ended is not asked.
func TestTerminalApproverContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	d, err := operations.TerminalApprover(&out, strings.NewReader("yes\n")).Approve(ctx, request("Exchange the jacket.", ""))
	if d == operations.Approve || !errors.Is(err, context.Canceled) || out.Len() != 0 {
		t.Fatalf("%v, %v; shown %q", d, err, out.String())
	}
}

// A hostile summary and terms can't drive the terminal: no escape
// sequence, carriage return, bell or bidirectional control reaches it,
// and a huge summary is shown bounded, with a warning, while the
// Company's name and the summary's words are shown (PA-OPS5-02).
func TestTerminalApproverHostileSummary(t *testing.T) {
	hostile := "Refund $5.00\x1b]0;pwned\x07\x1b[2J\rApproved already\u202edesrever \u2066x\u2069\x9b31m\u200b\U000e0041 end"
	huge := hostile + strings.Repeat("A", 1<<20)
	terms := `{"note":"\u001b[2J` + "\u202e" + `","amount":"5.00"}`
	for _, summary := range []string{hostile, huge} {
		var out bytes.Buffer
		req := request(summary, terms)
		req.Company = "Evil\x1b[31m Shop\u202e"
		req.ExpiresAt = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
		req.Reason = "terms_changed"
		d, err := operations.TerminalApprover(&out, strings.NewReader("no\n")).Approve(context.Background(), req)
		if d != operations.Decline || err != nil {
			t.Fatalf("%v, %v", d, err)
		}
		s := out.String()
		for _, bad := range []string{"\x1b", "\x07", "\r", "\u202e", "\u2066", "\u2069", "\x9b", "\u200b", "\U000e0041"} {
			if strings.Contains(s, bad) {
				t.Fatalf("%q reached the terminal:\n%q", bad, s[:min(len(s), 2000)])
			}
		}
		// PA-OPS5-02: the Company's name and the summary are shown.
		for _, want := range []string{`Evil\x1b[31m Shop\u202e (example.test) asks you to approve:`, "  Refund $5.00", "Approved already", " end",
			`"amount": "5.00"`, "operation exc_1, revision 2, until ", "The terms changed since you approved them."} {
			if !strings.Contains(s, want) {
				t.Fatalf("the prompt lacks %q:\n%s", want, s[:min(len(s), 2000)])
			}
		}
		if summary == huge {
			if len(s) > 20<<10 || !strings.Contains(s, "Warning: the summary is 1048") {
				t.Fatalf("a 1 MiB summary shown as %d bytes without a warning", len(s))
			}
		}
	}
}

// Show writes what an approval covers without asking, as Approve does
// before it asks.
func TestTerminalApproverShow(t *testing.T) {
	var shown, asked bytes.Buffer
	req := request("Exchange the jacket.\nIt ships today.", `{"total":{"amount":"9999.00"},"total.amount":"1.00"}`)
	req.Ambiguity = errors.New("ambiguous")
	if err := operations.TerminalApprover(&shown, nil).Show(req); err != nil {
		t.Fatal(err)
	}
	if _, err := operations.TerminalApprover(&asked, strings.NewReader("no\n")).Approve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(asked.String(), shown.String()) {
		t.Fatalf("Show shows\n%s\nApprove shows\n%s", shown.String(), asked.String())
	}
	for _, want := range []string{"  Exchange the jacket.\n  It ships today.\n", `"total.amount": "1.00"`, "Warning: these terms can be read more than one way"} {
		if !strings.Contains(shown.String(), want) {
			t.Fatalf("Show lacks %q:\n%s", want, shown.String())
		}
	}
}

// Through a Client: "no" declines the proposal at the Company; the end of
// the input leaves it proposed, with nothing sent; "yes" confirms it.
func TestTerminalApproverHandle(t *testing.T) {
	for _, tc := range []struct {
		typed, state string
		err          error
		posts        int
	}{
		{"yes\n", "succeeded", nil, 1},
		{"no\n", "cancelled", operations.ErrDeclined, 1},
		{"", "proposed", operations.ErrNoAnswer, 0},
	} {
		var out bytes.Buffer
		e := newEnv(t, nil, &operations.Options{Approver: operations.TerminalApprover(&out, strings.NewReader(tc.typed))})
		op := e.propose("itm_4Qa")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := e.c.Handle(ctx, op, nil)
		cancel()
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Fatalf("typed %q: %v, want %v", tc.typed, err, tc.err)
		}
		if st := info(t, e.Srv, op.ID).State; st != tc.state {
			t.Fatalf("typed %q: the operation is %s, want %s", tc.typed, st, tc.state)
		}
		if n := len(e.opRequests("/confirm")) + len(e.opRequests("/cancel")); n != tc.posts {
			t.Fatalf("typed %q: %d confirm or cancel requests, want %d", tc.typed, n, tc.posts)
		}
		if !strings.Contains(out.String(), "Example Company (example.test) asks you to approve:") {
			t.Fatalf("typed %q: shown\n%s", tc.typed, out.String())
		}
	}
}
