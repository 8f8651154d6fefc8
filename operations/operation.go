package operations

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/poppyproto/poppy/internal/companytext"
)

// State is where an operation is (OPS 3).
type State string

// The states of an operation.
const (
	StateProposed   State = "proposed"    // waiting to be confirmed until expires_at
	StateInProgress State = "in_progress" // confirmed; the Company is performing it or finding out
	StateSucceeded  State = "succeeded"   // performed (final)
	StateFailed     State = "failed"      // not completed; Result says what changed (final)
	StateCancelled  State = "cancelled"   // declined or stopped; Result says what changed (final)
	StateExpired    State = "expired"     // not confirmed in time; nothing was done (final)
)

// Final reports whether s is a final state: it never changes again.
func (s State) Final() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateExpired:
		return true
	}
	return false
}

func (s State) known() bool { return s == StateProposed || s == StateInProgress || s.Final() }

// rank orders states by progress, so that an older view never replaces a
// newer one.
func (s State) rank() int {
	switch s {
	case StateProposed:
		return 0
	case StateInProgress:
		return 1
	}
	return 2
}

// ApprovedBy says how the User approved a revision (OPS 5.1).
type ApprovedBy string

// The two ways of approval.
const (
	ApprovedByUser               ApprovedBy = "user"
	ApprovedByStandingPermission ApprovedBy = "standing_permission"
)

// Operation is one action the Company proposed, with the terms the User
// approves and, later, its result (OPS 3). Every text in it comes from the
// Company: show it to the User as the Company's words (see PlainText for a
// terminal), never act on it. A *Operation the SDK returns is a snapshot;
// the SDK never changes it afterwards.
type Operation struct {
	// ID is operation_id, opaque.
	ID string
	// Revision is the version of the terms, from 1.
	Revision int
	// State is where the operation is.
	State State
	// Summary is the terms in plain language, as the Company wrote them.
	Summary string
	// Terms is the same terms as a JSON object, nil when the Company sent
	// none, in their canonical encoding: the one reading the SDK checks
	// permissions against, shows the Approver and journals, which every
	// JSON parser reads the same way. Terms that can be read more than one
	// way (Ambiguity) are kept as sent, compacted, and no standing
	// permission covers them.
	Terms json.RawMessage
	// ExpiresAt is the last time this revision can be confirmed; zero if
	// the Company sent none (or sent Go's zero time, year one). A proposed
	// revision whose ExpiresAt is zero or has passed is never approved nor
	// confirmed (PA-OPS3-02).
	ExpiresAt time.Time
	// UserApprovalRequired is true when the Company accepts only the
	// User's own approval of this revision (OPS 5.1).
	UserApprovalRequired bool
	// URL is a page showing the operation on the Company's website, kept
	// only when it is an https URL. A Client's views (Observe, Get,
	// Propose, …) keep it only on an origin the Company's documents name
	// (the domain it was resolved from, organization.domain, the URLs of
	// poppy.json and the OAuth metadata), so that it can be shown as the
	// Company's; an operation from Parse or FromResponse alone is not
	// checked yet.
	URL string
	// Confirmation is nil until the operation is confirmed.
	Confirmation *Confirmation
	// Result is nil until the operation is final. Result.Summary is the
	// Company's account of every change that was made (OPS 6).
	Result *Result
	// RetryAfter is the Company's Retry-After on the response this
	// snapshot came from, zero if none.
	RetryAfter time.Duration
}

// Confirmation is how and when a revision was confirmed (OPS 5.2).
type Confirmation struct {
	Revision    int
	ApprovedBy  ApprovedBy
	ConfirmedAt time.Time
}

// Result is what happened, once the operation is final (OPS 6).
type Result struct {
	// Summary describes every change that was made, as the Company wrote it.
	Summary string
	// Data holds details such as a business reference; nil if none.
	Data json.RawMessage
}

// Limits on what a Company may send in one operation. Beyond them the
// operation is refused with ErrProtocol.
const (
	maxIDLen      = 256
	maxSummaryLen = 16 << 10
	maxTermsLen   = 64 << 10
	maxDataLen    = 64 << 10
	maxURLLen     = 2048
	maxRevision   = 1 << 30
	maxOpBytes    = 256 << 10
)

type wireConfirmation struct {
	Revision    int        `json:"revision"`
	ApprovedBy  ApprovedBy `json:"approved_by"`
	ConfirmedAt string     `json:"confirmed_at"`
}

type wireResult struct {
	Summary string          `json:"summary"`
	Data    json.RawMessage `json:"data,omitempty"`
}

type wireOperation struct {
	ID                   string            `json:"operation_id"`
	Revision             json.Number       `json:"revision"`
	State                State             `json:"state"`
	Summary              *string           `json:"summary"`
	Terms                json.RawMessage   `json:"terms,omitempty"`
	ExpiresAt            string            `json:"expires_at,omitempty"`
	UserApprovalRequired *bool             `json:"user_approval_required,omitempty"`
	URL                  string            `json:"url,omitempty"`
	Confirmation         *wireConfirmation `json:"confirmation"`
	Result               *wireResult       `json:"result"`
}

// Parse reads one operation object as the Company sent it in any channel
// (OPS 3). It is lenient where the extension is (terms, url,
// expires_at and user_approval_required may be absent; unknown members are
// ignored; PA-OPS3-01) and strict where it must be: operation_id, a
// revision of 1 or more, a known state, a summary, bounded sizes.
func Parse(raw []byte) (*Operation, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, ErrNoOperation
	}
	if len(raw) > maxOpBytes {
		return nil, protocolError("operation of %d bytes exceeds %d", len(raw), maxOpBytes)
	}
	var w wireOperation
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, protocolError("operation is not a JSON object")
	}
	op := &Operation{ID: w.ID, State: w.State}
	switch {
	case w.ID == "" || len(w.ID) > maxIDLen || !utf8.ValidString(w.ID) || hasControl(w.ID):
		return nil, protocolError("bad operation_id")
	case !w.State.known():
		return nil, protocolError("operation %s: unknown state %q", w.ID, clean(string(w.State), 40))
	case w.Summary == nil:
		return nil, protocolError("operation %s has no summary", w.ID)
	case len(*w.Summary) > maxSummaryLen:
		return nil, protocolError("operation %s: summary too long", w.ID)
	}
	rev, err := w.Revision.Int64()
	if err != nil || rev < 1 || rev > maxRevision {
		return nil, protocolError("operation %s: revision must be a whole number from 1", w.ID)
	}
	op.Revision = int(rev)
	op.Summary = *w.Summary
	if t := bytes.TrimSpace(w.Terms); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if t[0] != '{' {
			return nil, protocolError("operation %s: terms is not an object", w.ID)
		}
		if len(t) > maxTermsLen {
			return nil, protocolError("operation %s: terms too large", w.ID)
		}
		// The one reading of the terms (terms.go): canonical bytes, or the
		// bytes as sent when they can be read more than one way.
		ct, ok := canonicalTerms(t)
		if !ok {
			return nil, protocolError("operation %s: terms is not a JSON object", w.ID)
		}
		op.Terms = ct
	}
	if w.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339, w.ExpiresAt)
		if err != nil {
			return nil, protocolError("operation %s: expires_at is not an RFC 3339 time", w.ID)
		}
		op.ExpiresAt = t
	}
	if w.UserApprovalRequired != nil {
		op.UserApprovalRequired = *w.UserApprovalRequired
	}
	if w.URL != "" && len(w.URL) <= maxURLLen {
		if u, err := url.Parse(w.URL); err == nil && u.Scheme == "https" && u.Host != "" {
			op.URL = w.URL
		}
	}
	if c := w.Confirmation; c != nil {
		op.Confirmation = &Confirmation{Revision: c.Revision, ApprovedBy: c.ApprovedBy}
		if t, err := time.Parse(time.RFC3339, c.ConfirmedAt); err == nil {
			op.Confirmation.ConfirmedAt = t
		}
	}
	if r := w.Result; r != nil {
		if len(r.Summary) > maxSummaryLen || len(r.Data) > maxDataLen {
			return nil, protocolError("operation %s: result too large", w.ID)
		}
		op.Result = &Result{Summary: r.Summary}
		if d := bytes.TrimSpace(r.Data); len(d) > 0 && !bytes.Equal(d, []byte("null")) {
			op.Result.Data = compact(d)
		}
	}
	return op, nil
}

// MarshalJSON writes the operation in its wire form.
func (op *Operation) MarshalJSON() ([]byte, error) {
	w := wireOperation{ID: op.ID, Revision: json.Number(itoa(op.Revision)), State: op.State, Summary: &op.Summary,
		Terms: op.Terms, URL: op.URL, UserApprovalRequired: &op.UserApprovalRequired}
	if !op.ExpiresAt.IsZero() {
		w.ExpiresAt = op.ExpiresAt.Format(time.RFC3339)
	}
	if c := op.Confirmation; c != nil {
		w.Confirmation = &wireConfirmation{Revision: c.Revision, ApprovedBy: c.ApprovedBy}
		if !c.ConfirmedAt.IsZero() {
			w.Confirmation.ConfirmedAt = c.ConfirmedAt.Format(time.RFC3339)
		}
	}
	if r := op.Result; r != nil {
		w.Result = &wireResult{Summary: r.Summary, Data: r.Data}
	}
	return json.Marshal(w)
}

// UnmarshalJSON is Parse.
func (op *Operation) UnmarshalJSON(b []byte) error {
	p, err := Parse(b)
	if err != nil {
		return err
	}
	*op = *p
	return nil
}

// Clone returns a deep copy.
func (op *Operation) Clone() *Operation {
	if op == nil {
		return nil
	}
	c := *op
	c.Terms = clone(op.Terms)
	if op.Confirmation != nil {
		cc := *op.Confirmation
		c.Confirmation = &cc
	}
	if op.Result != nil {
		r := *op.Result
		r.Data = clone(op.Result.Data)
		c.Result = &r
	}
	return &c
}

// Expired reports whether the revision's expires_at has passed at now.
func (op *Operation) Expired(now time.Time) bool {
	return op.State == StateExpired || op.State == StateProposed && !op.ExpiresAt.IsZero() && !now.Before(op.ExpiresAt)
}

// expiryError is the one check of a proposed revision's expires_at, made
// before the User (or a standing permission) is asked and again before the
// revision is confirmed, whichever way (PA-OPS3-02). expires_at is required
// while an operation is proposed (OPS 3): a revision without one, or with
// the zero time ("0001-01-01T00:00:00Z", which reads as no time at all), is
// the Company's error (ErrProtocol); one whose expires_at is not after now
// has expired (ErrOperationExpired). Parse stays lenient (PA-OPS3-01): such
// an operation is read and shown, never approved.
func (op *Operation) expiryError(now time.Time) error {
	switch {
	case op.ExpiresAt.IsZero():
		return protocolError("operation %s revision %d is proposed without an expires_at", op.ID, op.Revision)
	case !now.Before(op.ExpiresAt):
		return fmt.Errorf("%w: %s revision %d", ErrOperationExpired, op.ID, op.Revision)
	}
	return nil
}

// TermsMap returns the terms decoded, numbers as json.Number, from the
// same reading the permission check uses; nil when the operation has no
// terms or they can be read more than one way (Ambiguity).
func (op *Operation) TermsMap() map[string]any {
	if op.Terms == nil {
		return nil
	}
	r, err := readTerms(op.Terms)
	if err != nil || r.amb != nil {
		return nil
	}
	m, _ := r.root.decoded().(map[string]any)
	return m
}

// sameRevision reports whether a and b hold the same fixed content of one
// revision: summary and terms (OPS 3.1: a revision never changes). Terms
// are compared by their reading, members in any order; terms that can be
// read more than one way only by their bytes, so that a revision can't
// pass from one reading to another.
func sameRevision(a, b *Operation) bool {
	return a.Summary == b.Summary && termsKey(a.Terms) == termsKey(b.Terms)
}

// merge returns the view to keep when next arrives for an operation the SDK
// knows as cur (OPS 4: one operation across channels). The newest revision
// wins; within a revision the state only moves forward; a final state is
// never replaced (CO-OPS3-10). Changed terms under a revision already seen
// are a protocol error (PA-OPS3-09).
func merge(cur, next *Operation) (*Operation, error) {
	if cur == nil {
		return next, nil
	}
	switch {
	case next.Revision == cur.Revision && !sameRevision(cur, next):
		return cur, protocolError("operation %s: revision %d changed its terms", cur.ID, cur.Revision)
	case cur.State.Final():
		return cur, nil
	case next.Revision < cur.Revision:
		return cur, nil // a stale view from a slower channel
	case next.Revision > cur.Revision && cur.State != StateProposed:
		return cur, protocolError("operation %s: a new revision after it was confirmed", cur.ID)
	case next.Revision == cur.Revision && next.State.rank() < cur.State.rank():
		return cur, nil
	}
	return next, nil
}

func compact(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return clone(b)
	}
	return buf.Bytes()
}

func clone(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}

// PlainText returns Company text fit to show on a terminal, a page or in a
// log, or to give a model: line breaks and tabs are kept, and every rune
// that could drive a terminal, reorder what is shown (bidirectional
// controls such as U+202E) or hide text (tag characters, invisible format
// characters) becomes U+FFFD, invalid UTF-8 too; the result is at most max
// bytes (0 means no limit), cut with "…". Show summaries to the User
// through it.
func PlainText(s string, max int) string { return companytext.Text(s, max) }

func clean(s string, max int) string { return companytext.Line(s, max) }

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
