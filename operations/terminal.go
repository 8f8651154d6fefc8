package operations

// An Approver for programs that run in a terminal (a script, the poppy
// command): the rules every approval on a terminal must follow, in one
// place, so that a script does not write its own. Only a typed "yes"
// approves and only a typed "no" declines (OPS 5.1, PA-OPS5-03): an answer
// that is neither is asked again, and after maxAsks of them, or at the end
// of the input, there is no answer, which is not a decline: the operation
// stays proposed, as it was, and nothing is sent to the Company. Input
// that is a file but not a terminal (a pipe, a redirected file) is never
// read for an answer, so "yes | script" approves nothing.
//
// Everything shown but the command's own words comes from the Company:
// the summary goes through the one Company-text cleaner
// (internal/companytext: bounded, line breaks normalised, runes that could
// drive the terminal, reorder or hide text replaced), then, like every
// other Company string here (name, domain, operation ID, terms), through
// the one terminal-text escaper (internal/termtext), line by line.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/poppyproto/poppy/internal/companytext"
	"github.com/poppyproto/poppy/internal/termtext"
)

// ErrNoAnswer is the error of a Terminal's Approve when the User neither
// approved nor declined: the input ended, or every answer was neither
// "yes" nor "no". It is not a decline: Handle leaves the operation
// proposed, as it was, and sends nothing to the Company.
var ErrNoAnswer = errors.New("operations: no answer: the operation was neither approved nor declined")

// errNoTerminal is the error of a Terminal's Approve when its input is a
// file that is not a terminal (a pipe, a redirected file): it is never read
// for an answer. It matches ErrNoAnswer, which is what a caller branches on.
var errNoTerminal = fmt.Errorf("%w (approval needs the User's answer on a terminal, and the input is not one)", ErrNoAnswer)

const (
	// maxAsks is how often an answer that is neither "yes" nor "no" is
	// asked again before the question counts as unanswered.
	maxAsks = 3
	// maxAnswer bounds one line the User types; a longer one is neither
	// "yes" nor "no".
	maxAnswer = 4096
	// maxShownSummary and maxShownTerms bound what is shown of a summary
	// and of the terms: Parse's own bounds, so that a summary or terms
	// from the Company are always shown whole.
	maxShownSummary = maxSummaryLen
	maxShownTerms   = maxTermsLen
)

// Terminal is an Approver that shows the User what an approval covers on
// a terminal and reads their answer from it. Make one with
// TerminalApprover.
type Terminal struct {
	out io.Writer
	in  io.Reader
	// notTTY: in is a file that is not a terminal, never read.
	notTTY bool
}

// TerminalApprover returns an Approver that writes to out and reads the
// User's answer, one line, from in: usually
// operations.TerminalApprover(os.Stdout, os.Stdin).
//
// Only a typed "yes" approves and only a typed "no" declines (in any
// case, around spaces); any other answer is asked again, three times in
// all. The end of the input, or three answers that are neither, is no
// answer: Approve returns ErrNoAnswer, and Handle leaves the operation
// proposed without telling the Company anything. When in is a file (an
// *os.File, or a reader whose Fd method names one) that is not a
// terminal, such as a pipe, it is never read: Approve returns
// an error matching ErrNoAnswer that says so, so that what a script pipes in can neither approve nor
// decline. A reader without a file descriptor is read as what the User
// typed.
//
// Reading the terminal can't be interrupted: Approve checks ctx before it
// asks, but a read in progress ends only with a line or the end of the
// input. To stop waiting on Ctrl-C, give a reader whose Read returns when
// your context ends.
func TerminalApprover(out io.Writer, in io.Reader) *Terminal {
	t := &Terminal{out: out, in: in}
	if f, ok := in.(interface{ Fd() uintptr }); ok {
		fd := f.Fd()
		t.notTTY = fd == ^uintptr(0) || !termtext.IsTerminal(fd)
	}
	return t
}

// Approve shows req and asks the User for "yes" or "no".
func (t *Terminal) Approve(ctx context.Context, req *ApprovalRequest) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decline, err
	}
	if t.notTTY {
		return Decline, errNoTerminal
	}
	if err := t.Show(req); err != nil {
		return Decline, err
	}
	for i := range maxAsks {
		if i > 0 {
			t.printf("  Please answer \"yes\" or \"no\".\n")
		}
		t.printf("Type \"yes\" to approve or \"no\" to decline: ")
		line, err := termtext.ReadLine(t.in, maxAnswer)
		if errors.Is(err, termtext.ErrLineTooLong) {
			continue // neither yes nor no
		}
		if err != nil {
			t.printf("\n")
			if errors.Is(err, io.EOF) {
				return Decline, ErrNoAnswer
			}
			return Decline, fmt.Errorf("operations: reading the answer: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return Decline, err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "yes":
			return Approve, nil
		case "no":
			return Decline, nil
		}
	}
	return Decline, ErrNoAnswer
}

// Show writes what an approval of req covers, as Approve shows it before
// asking: the Company and its domain, the summary and the terms as the
// Company wrote them (made safe to print), a warning when the terms can be
// read more than one way, the operation, its revision and until when it
// can be confirmed, and why the User is asked again. An interface that
// approves by other means (a flag the User gave, say) shows the User with
// Show what was approved.
func (t *Terminal) Show(req *ApprovalRequest) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s (%s) asks you to approve:\n", termtext.Escape(req.Company), termtext.Escape(req.Domain))
	summary := companytext.Text(req.Summary, maxShownSummary)
	b.WriteString(indentLines(summary, "  "))
	if len(req.Summary) > maxShownSummary {
		fmt.Fprintf(&b, "  Warning: the summary is %d bytes long; only the first %d are shown.\n", len(req.Summary), maxShownSummary)
	}
	if len(req.Terms) > 0 {
		// Indented as they are, not decoded: every member shows, in the
		// Company's order, duplicates included (the one reading of the
		// terms, Operation.Terms).
		raw := req.Terms
		cut := len(raw) > maxShownTerms
		if cut {
			raw = raw[:maxShownTerms]
		}
		var terms bytes.Buffer
		if cut || json.Indent(&terms, raw, "", "  ") != nil {
			terms.Reset()
			terms.Write(raw)
		}
		b.WriteString("  terms:\n")
		b.WriteString(indentLines(terms.String(), "    "))
		if cut {
			fmt.Fprintf(&b, "  Warning: the terms are %d bytes long; only the first %d are shown.\n", len(req.Terms), maxShownTerms)
		}
	}
	if req.Ambiguity != nil {
		why := req.Ambiguity.Error()
		if ae := (*AmbiguousTermsError)(nil); errors.As(req.Ambiguity, &ae) {
			why = ae.Reason
		}
		fmt.Fprintf(&b, "  Warning: these terms can be read more than one way (%s): the summary may not say what they say.\n", termtext.Escape(why))
	}
	fmt.Fprintf(&b, "  operation %s, revision %d", termtext.Escape(req.OperationID), req.Revision)
	if !req.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, ", until %s", req.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
	}
	b.WriteString("\n")
	switch req.Reason {
	case "terms_changed":
		b.WriteString("  The terms changed since you approved them.\n")
	case "user_approval_required":
		b.WriteString("  The Company wants your own approval, not a standing permission.\n")
	}
	_, err := io.WriteString(t.out, b.String())
	return err
}

// indentLines writes each line of s, escaped for a terminal, indented.
func indentLines(s, indent string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		b.WriteString(indent + termtext.Escape(l) + "\n")
	}
	return b.String()
}

func (t *Terminal) printf(format string, args ...any) { _, _ = fmt.Fprintf(t.out, format, args...) }
