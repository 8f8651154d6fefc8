package poppytest

// The operations extension v1 (operations-1.md): the operations endpoint
// https://api.{primary}/poppy/operations, the operations the API proposes,
// and the performer that carries confirmed operations out.
//
// Every operation is a fakeOp guarded by opsState.mu. Its revisions are
// fixed once issued (CO-OPS3-11) and only the latest is confirmable; a
// state change goes through setStateLocked, which panics on any transition
// out of a final state (CO-OPS3-10). The performer acts only on the
// proposed → in_progress transition of a confirm, so each operation is
// performed at most once however often it is confirmed (CO-OPS6-02); the
// perform count and the backend's action log make that observable. A
// proposed operation past expires_at becomes expired when next read
// lazily).
//
// Ownership (OPS 3.2, A-39): an operation belongs to the Session it was
// proposed in and, if that Session was signed in then, to the account:
// another Session of the same client and User ID signed in to the same
// account may use it. One proposed signed out stays the Session's alone,
// even after the Session signs in. Anyone else gets the same 404
// operation_not_found as for an unknown ID.
//
// Confirm checks, in order: ownership (404), the scopes the action
// needs (403 sign_in_required / insufficient_scope), then a state other
// than proposed (or an expired revision) answers the operation as it is,
// then the revision (409 terms_changed with the current operation), then
// approved_by (403 user_approval_required). Checking the state before the
// revision makes every repeated confirm safe. Every answer is 200 with the
// operation; in_progress carries Retry-After.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OperationsOptions configures the operations extension (Options.Operations).
type OperationsOptions struct {
	// Resource, if set, is the operations entry's "resource" in
	// poppy.json, and the endpoint accepts only tokens issued for it
	// (CO-OPS2-02). Without it the endpoint accepts the API's tokens.
	Resource string
	// RequireOperations makes POST /orders/{id}/exchanges refuse an agent
	// whose client metadata doesn't list the extension with 403
	// {"error":"extension_required","extension":"operations"}
	// (CO-OPS2-04). By default it performs the exchange at once for such
	// an agent (201), as it would without the extension.
	RequireOperations bool
	// TTL is how long each revision can be confirmed (expires_at).
	// Default 15 minutes.
	TTL time.Duration
	// UserApprovalRequired sets user_approval_required on every proposal.
	UserApprovalRequired bool
	// Perform is what the performer does with a confirmed operation.
	// Default PerformSucceed. Operations().SetPerform changes it at run time.
	Perform PerformMode
	// SlowFor is how long (Clock time) PerformSlow stays in_progress.
	// Default 10 s.
	SlowFor time.Duration
	// RetryAfter is the Retry-After, in seconds, of in_progress answers.
	// Default 2. OmitRetryAfter leaves the header out (PA-OPS6-02).
	RetryAfter     int
	OmitRetryAfter bool
	// Faults, if set, is asked before each confirm, read and cancel of an
	// operation and may inject a fault into it.
	Faults func(OperationRequest) OperationFault
	// ProposeFaults, if set, is asked the same before each proposing
	// request of POST /orders/{id}/exchanges (Kind "propose"), once it is
	// authenticated: FaultLoseResponse proposes, then closes the connection
	// instead of answering 202. A test may also act from it while the
	// request is held, such as killing the agent's process after it sent
	// the request.
	ProposeFaults func(OperationRequest) OperationFault
	// ProposeAgain makes every proposing request propose a new operation
	// while one for the same action is open, unless it is a retry (an
	// Idempotency-Key the fake has answered before): a Company that doesn't
	// follow the CO-OPS4-01 SHOULD. Tests use it to count an agent's new
	// proposals: with it, each one is a new operation.
	ProposeAgain bool
}

// PerformMode is how the fake's performer acts on a confirmed operation.
type PerformMode int

// The performer's modes.
const (
	// PerformSucceed performs at once: the confirm answers succeeded.
	PerformSucceed PerformMode = iota
	// PerformSlow answers in_progress with Retry-After and succeeds
	// OperationsOptions.SlowFor later (Clock time).
	PerformSlow
	// PerformFailPartway emails the return label, then fails to charge:
	// failed, with a result.summary naming the label (CO-OPS6-05).
	PerformFailPartway
	// PerformUnknown leaves the outcome unknown: in_progress until
	// Operations().Resolve (CO-OPS6-04).
	PerformUnknown
)

// OperationRequest is one request to an operation, as Faults sees it.
type OperationRequest struct {
	// OperationID is the operation, "" for a proposing request (its
	// operation isn't known before it is processed).
	OperationID string
	// Kind is "confirm", "read", "cancel" or "propose".
	Kind string
	// Action is the key of a proposing request's action (for exchanges:
	// "{order} {item}"), "" for the other kinds.
	Action string
	// Attempt counts the requests of this Kind to the operation (for
	// "propose": to the action), from 1.
	Attempt int
	// IdempotencyKey is a proposing request's Idempotency-Key header, ""
	// if it has none.
	IdempotencyKey string
}

// OperationFault is a fault Faults injects.
type OperationFault int

// The faults.
const (
	FaultNone OperationFault = iota
	// FaultCut closes the connection before the request is processed.
	FaultCut
	// FaultLoseResponse processes the request (a confirm is recorded and
	// performed), then closes the connection instead of answering.
	FaultLoseResponse
	// Fault5xxAfter processes the request, then answers 500.
	Fault5xxAfter
	// Fault503 answers 503 with Retry-After: 1 without processing.
	Fault503
)

// PerformedAction is one action the Company's backend carried out.
type PerformedAction struct {
	// OperationID is the operation it performed, "" for an exchange
	// performed directly for an agent without the extension.
	OperationID string
	// Key identifies the action (for exchanges: order, item and
	// replacement SKU).
	Key string
	// Terms are the terms it performed: those of the confirmed revision
	// (CO-OPS3-08).
	Terms map[string]any
	Time  time.Time
}

// OperationInfo is the fake's record of an operation, for tests.
type OperationInfo struct {
	ID        string
	Revision  int
	State     string
	SessionID string
	Account   string // the account it belongs to, "" for a signed-out proposal
	// Performed counts how often the performer acted on it: 0 or 1.
	Performed int
	// Confirms, Reads and Cancels count the requests it received at the
	// operations endpoint; WebsiteConfirms and WebsiteCancels the confirm
	// and cancel forms posted on its page (OPS 4.4).
	Confirms, Reads, Cancels        int
	WebsiteConfirms, WebsiteCancels int
	// ConfirmedVia is where it was confirmed: "endpoint", "website", or
	// "" while unconfirmed.
	ConfirmedVia string
	// Proposals counts the proposing requests answered with it: one, plus
	// each retry (an Idempotency-Key it was proposed with) and each request
	// of the same action while it was open (CO-OPS4-01).
	Proposals int
	// IdempotencyKeys are the Idempotency-Key headers of the proposing
	// requests answered with it, in order ("" for none).
	IdempotencyKeys []string
	// JSON is the operation as the endpoint would answer it now.
	JSON json.RawMessage
}

type opsState struct {
	mu        sync.Mutex
	ops       map[string]*fakeOp
	order     []string
	actions   []PerformedAction
	perform   PerformMode
	hold      chan struct{} // non-nil: confirms wait for it to close
	mutateRev map[string]bool
	// idem maps (client, User, Idempotency-Key) to what the key proposed.
	idem map[string]idemUse
	// proposeAttempts counts proposing requests per action (Faults).
	proposeAttempts map[string]int
}

// idemUse is what a proposing request with an Idempotency-Key asked for and
// the operation it got.
type idemUse struct {
	opID        string
	fingerprint string
}

type opRevision struct {
	n       int
	summary string
	terms   map[string]any
	expires time.Time
}

type fakeOp struct {
	id        string
	key       string
	revs      []opRevision
	state     string
	sessionID string
	clientID  string
	sub       string
	account   string
	scopes    []string
	uar       bool
	url       string
	confirmed *opConfirmation
	result    map[string]any
	mode      PerformMode
	readyAt   time.Time
	cancelReq bool
	performed int
	counts    map[string]int
	idemKeys  []string // Idempotency-Key of each proposing request answered with it
	// perform carries the action out; it returns the result of a
	// successful perform.
	perform func(terms map[string]any) (summary string, data map[string]any)
}

type opConfirmation struct {
	revision   int
	approvedBy string
	at         time.Time
	via        string // "endpoint" or "website"
}

func (s *Server) configureOperations() error {
	o := &s.opts.Operations
	if o.TTL < 0 || o.SlowFor < 0 || o.RetryAfter < 0 {
		return errors.New("poppytest: Operations: TTL, SlowFor and RetryAfter must not be negative")
	}
	if o.TTL == 0 {
		o.TTL = 15 * time.Minute
	}
	if o.SlowFor == 0 {
		o.SlowFor = 10 * time.Second
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = 2
	}
	if o.Resource != "" && !strings.HasPrefix(o.Resource, "https://") {
		return fmt.Errorf("poppytest: Operations.Resource %q must be an https URL", o.Resource)
	}
	s.ops = opsState{ops: map[string]*fakeOp{}, perform: o.Perform, mutateRev: map[string]bool{},
		idem: map[string]idemUse{}, proposeAttempts: map[string]int{}}
	return nil
}

// operationsEndpoint returns the operations endpoint URL.
func (s *Server) operationsEndpoint() string { return s.apiURL() + "/poppy/operations" }

// clientListsOperations reports whether the client metadata document of
// clientID lists the operations extension at version "1" (OPS 2, A-33).
func (s *Server) clientListsOperations(clientID string) bool {
	s.clientMu.Lock()
	ci := s.clients[clientID]
	s.clientMu.Unlock()
	if ci == nil {
		return false
	}
	exts, _ := ci.metadata["extensions"].(map[string]any)
	e, _ := exts["operations"].(map[string]any)
	switch v := e["version"].(type) {
	case string:
		return v == "1"
	case json.Number:
		return v.String() == "1"
	case float64:
		return v == 1
	}
	return false
}

// errNoOperations is proposeOperation's answer for an agent that doesn't
// list the extension: the caller performs the action directly or refuses
// with extension_required (CO-OPS2-03, CO-OPS2-04).
var errNoOperations = errors.New("poppytest: the agent does not list the operations extension")

// operationProposal is what a fake resource server proposes.
type operationProposal struct {
	// Key identifies the action. While an operation with the same Key is
	// open for the same owner, proposing again returns it (CO-OPS4-01).
	Key string
	// IDPrefix starts the operation_id ("exc_" for exchanges, CO-OPS3-02).
	// Default "op_".
	IDPrefix string
	// Summary states every term in words (CO-OPS3-06); Terms holds them
	// (CO-OPS3-07).
	Summary string
	Terms   map[string]any
	// Scopes are what a confirm needs (CO-OPS5-02). The Session's own
	// scopes at proposal time when nil.
	Scopes []string
	// Perform carries the action out once, when confirmed, and returns
	// the result. Nil records the terms in the backend log and reports
	// "Done: " + Summary.
	Perform func(terms map[string]any) (summary string, data map[string]any)
	// IdempotencyKey is the proposing request's Idempotency-Key header,
	// "" for none, and Fingerprint what the request asked for. A request
	// with a key its owner sent before gets the operation that key
	// proposed back, in whatever state it is now
	// (draft-ietf-httpapi-idempotency-key-header); the same key with
	// another Fingerprint is refused with errIdempotencyMismatch.
	IdempotencyKey, Fingerprint string
}

// errIdempotencyMismatch: an Idempotency-Key reused for another request
// (the draft's 422).
var errIdempotencyMismatch = errors.New("poppytest: the Idempotency-Key was used for another request")

// maxIdempotencyKey bounds an Idempotency-Key header.
const maxIdempotencyKey = 255

// proposeOperation proposes an operation for the Session sessionID, as an
// endpoint, MCP tool or Company Agent that would perform an action does
// (OPS 4), and returns the operation's JSON for the channel to carry (MCP:
// structuredContent.operation with the summary as text; conversations:
// message.operation). It returns errNoOperations, and proposes nothing,
// when the Session's agent doesn't list the extension (CO-OPS2-03), and
// an error for an unknown or ended Session. The fake MCP server and Company
// Agent call it; the operation is then confirmed at the operations
// endpoint like any other.
func (s *Server) proposeOperation(sessionID string, p operationProposal) (json.RawMessage, error) {
	s.mu.Lock()
	ss := s.sessions[sessionID]
	var sc session
	if ss != nil {
		s.lapseLocked(ss, s.clock.Now())
		sc = *ss
	}
	s.mu.Unlock()
	if ss == nil || sc.ended {
		return nil, fmt.Errorf("poppytest: proposeOperation: no Session %q", sessionID)
	}
	if !s.clientListsOperations(sc.clientID) {
		return nil, errNoOperations
	}
	account := ""
	if sc.signedIn {
		account = sc.account
	}
	scopes := p.Scopes
	if scopes == nil {
		scopes = slices.Clone(sc.scopes)
	}
	op, err := s.propose(sessionID, sc.clientID, sc.sub, account, scopes, p)
	if err != nil {
		return nil, err
	}
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	return s.opJSONLocked(op), nil
}

// propose creates the operation, or returns the one an earlier request
// with the same Idempotency-Key proposed, or the open one with the same key
// and owner (CO-OPS4-01; not with ProposeAgain).
func (s *Server) propose(sessionID, clientID, sub, account string, scopes []string, p operationProposal) (*fakeOp, error) {
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	defer st.mu.Unlock()
	mine := func(op *fakeOp) bool {
		return op.clientID == clientID && op.sub == sub && (op.sessionID == sessionID || op.account != "" && op.account == account)
	}
	answer := func(op *fakeOp) (*fakeOp, error) {
		op.counts["propose"]++
		op.idemKeys = append(op.idemKeys, p.IdempotencyKey)
		return op, nil
	}
	idemKey := ""
	if p.IdempotencyKey != "" {
		idemKey = clientID + "\x00" + sub + "\x00" + p.IdempotencyKey
		if u, ok := st.idem[idemKey]; ok {
			if op := st.ops[u.opID]; op != nil && mine(op) {
				if u.fingerprint != p.Fingerprint {
					return nil, errIdempotencyMismatch
				}
				s.expireLocked(op, now)
				return answer(op) // the retry of the same request
			}
		}
	}
	if p.Key != "" && !s.opts.Operations.ProposeAgain {
		for _, id := range st.order {
			op := st.ops[id]
			s.expireLocked(op, now)
			if op.key == p.Key && !finalState(op.state) && mine(op) {
				if idemKey != "" {
					st.idem[idemKey] = idemUse{opID: op.id, fingerprint: p.Fingerprint}
				}
				return answer(op)
			}
		}
	}
	prefix := p.IDPrefix
	if prefix == "" {
		prefix = "op_"
	}
	id := newID(prefix, 6)
	op := &fakeOp{
		id: id, key: p.Key, state: "proposed", sessionID: sessionID, clientID: clientID, sub: sub,
		account: account, scopes: slices.Clone(scopes), uar: s.opts.Operations.UserApprovalRequired,
		url:    "https://" + s.primary + "/operations/" + id,
		counts: map[string]int{}, perform: p.Perform,
	}
	op.revs = []opRevision{{n: 1, summary: p.Summary, terms: cloneTerms(p.Terms), expires: s.expiry(now)}}
	st.ops[id] = op
	st.order = append(st.order, id)
	if idemKey != "" {
		st.idem[idemKey] = idemUse{opID: id, fingerprint: p.Fingerprint}
	}
	return answer(op)
}

// expiry is a new revision's expires_at, whole seconds, always later than
// any earlier one.
func (s *Server) expiry(now time.Time) time.Time {
	return now.Add(s.opts.Operations.TTL).Truncate(time.Second).Add(time.Second)
}

func finalState(st string) bool {
	return st == "succeeded" || st == "failed" || st == "cancelled" || st == "expired"
}

// setStateLocked moves op to st. A final state never changes (CO-OPS3-10):
// trying is a bug in the fake, and panics.
func setStateLocked(op *fakeOp, st string) {
	if finalState(op.state) {
		panic(fmt.Sprintf("poppytest: operation %s: transition %s → %s out of a final state", op.id, op.state, st))
	}
	op.state = st
}

// expireLocked makes a proposed operation past expires_at expired (A-36:
// lazily, when next used).
func (s *Server) expireLocked(op *fakeOp, now time.Time) {
	if op.state == "proposed" && !now.Before(op.latest().expires) {
		setStateLocked(op, "expired")
		op.result = map[string]any{"summary": "Not confirmed before it expired. Nothing was done."}
	}
}

// progressLocked lets time-bound performs finish.
func (s *Server) progressLocked(op *fakeOp, now time.Time) {
	s.expireLocked(op, now)
	if op.state != "in_progress" || op.mode != PerformSlow || now.Before(op.readyAt) {
		return
	}
	if op.cancelReq {
		setStateLocked(op, "cancelled")
		op.result = map[string]any{"summary": "Stopped before the exchange was placed. Nothing was shipped or charged."}
		return
	}
	s.completeLocked(op)
}

func (op *fakeOp) latest() opRevision { return op.revs[len(op.revs)-1] }

func (op *fakeOp) revision(n int) opRevision {
	for _, r := range op.revs {
		if r.n == n {
			return r
		}
	}
	return op.latest()
}

// completeLocked performs the confirmed revision successfully.
func (s *Server) completeLocked(op *fakeOp) {
	terms := op.revision(op.confirmed.revision).terms
	summary, data := "", map[string]any(nil)
	if op.perform != nil {
		summary, data = op.perform(cloneTerms(terms))
	} else {
		summary = "Done: " + op.revision(op.confirmed.revision).summary
	}
	s.ops.actions = append(s.ops.actions, PerformedAction{OperationID: op.id, Key: op.key, Terms: cloneTerms(terms), Time: s.clock.Now()})
	setStateLocked(op, "succeeded")
	op.result = map[string]any{"summary": summary}
	if data != nil {
		op.result["data"] = data
	}
}

// performLocked starts the action of a just-confirmed operation. It is
// called once per operation, on its proposed → in_progress transition.
func (s *Server) performLocked(op *fakeOp, now time.Time) {
	op.performed++
	op.mode = s.ops.perform
	switch op.mode {
	case PerformSucceed:
		s.completeLocked(op)
	case PerformSlow:
		op.readyAt = now.Add(s.opts.Operations.SlowFor)
	case PerformFailPartway:
		terms := op.revision(op.confirmed.revision).terms
		s.ops.actions = append(s.ops.actions, PerformedAction{OperationID: op.id, Key: op.key + " (partial)", Terms: cloneTerms(terms), Time: now})
		setStateLocked(op, "failed")
		op.result = map[string]any{"summary": "A return label for the original jacket was emailed, but the charge for the price difference failed, so the replacement was not shipped. The label is still valid; nothing was charged."}
	case PerformUnknown:
		// The payment system timed out: stays in_progress (CO-OPS6-04).
	}
}

// opJSONLocked renders op as the endpoint answers it (CO-OPS3-01).
func (s *Server) opJSONLocked(op *fakeOp) json.RawMessage {
	b, _ := json.Marshal(s.opMapLocked(op))
	return b
}

func (s *Server) opMapLocked(op *fakeOp) map[string]any {
	rev := op.latest()
	if op.confirmed != nil {
		rev = op.revision(op.confirmed.revision)
	}
	summary := rev.summary
	if s.ops.mutateRev[op.id] {
		summary += " (terms updated)" // negative: breaks CO-OPS3-11 on purpose
	}
	m := map[string]any{
		"operation_id":           op.id,
		"revision":               rev.n,
		"state":                  op.state,
		"summary":                summary,
		"user_approval_required": op.uar,
		"url":                    op.url,
		"confirmation":           nil,
		"result":                 nil,
	}
	if rev.terms != nil {
		m["terms"] = cloneTerms(rev.terms)
	}
	if op.state == "proposed" || op.state == "expired" {
		m["expires_at"] = rev.expires.Format(time.RFC3339)
	}
	if c := op.confirmed; c != nil {
		m["confirmation"] = map[string]any{"revision": c.revision, "approved_by": c.approvedBy, "confirmed_at": c.at.Format(time.RFC3339)}
	}
	if op.result != nil && finalState(op.state) {
		m["result"] = maps.Clone(op.result)
	}
	return m
}

// serveOperations answers the operations endpoint (OPS 5–7).
func (s *Server) serveOperations(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if s.opts.Tokens.RotateNonce {
		w.Header().Set("DPoP-Nonce", s.rotateNonce(x.host))
	}
	a, ok := s.authenticate(w, r, s.opsAccepts)
	if !ok {
		return
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/poppy/operations"), "/")
	id, verb, _ := strings.Cut(rest, "/")
	kind := ""
	switch {
	case id == "" || strings.Contains(verb, "/"):
	case verb == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		kind = "read"
	case verb == "confirm" && r.Method == http.MethodPost:
		kind = "confirm"
	case verb == "cancel" && r.Method == http.MethodPost:
		kind = "cancel"
	}
	if kind == "" {
		s.notFound(w, r)
		return
	}
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	op := st.ops[id]
	if op == nil || !s.mayUse(op, a) {
		st.mu.Unlock()
		// CO-OPS3-16, CO-OPS9-02: unknown and foreign look the same.
		s.opError(w, r, http.StatusNotFound, "operation_not_found", "no such operation", nil)
		return
	}
	op.counts[kind]++
	attempt := op.counts[kind]
	st.mu.Unlock()

	fault := FaultNone
	if f := s.opts.Operations.Faults; f != nil {
		fault = f(OperationRequest{OperationID: id, Kind: kind, Attempt: attempt})
	}
	if s.injectFault(w, r, fault) {
		return
	}

	var status int
	var body any
	switch kind {
	case "read":
		status, body = s.readOp(op, now)
	case "cancel":
		status, body = s.cancelOp(op, now)
	case "confirm":
		if hold := s.confirmHold(); hold != nil {
			<-hold
			now = s.clock.Now()
		}
		var ok bool
		if status, body, ok = s.confirmOp(w, r, a, op, now); !ok {
			return
		}
	}
	switch fault {
	case FaultLoseResponse:
		x.errorCode = "response_lost"
		panic(http.ErrAbortHandler)
	case Fault5xxAfter:
		x.errorCode = "server_error"
		s.writeJSON(w, r, http.StatusInternalServerError, oauthError("server_error", "injected by poppytest"))
		return
	}
	if m, ok := body.(map[string]any); ok && m["state"] == "in_progress" && !s.opts.Operations.OmitRetryAfter {
		w.Header().Set("Retry-After", strconv.Itoa(s.opts.Operations.RetryAfter)) // CO-OPS6-01
	}
	if m, ok := body.(map[string]any); ok && m["error"] != nil {
		x.errorCode, _ = m["error"].(string)
	}
	s.writeJSON(w, r, status, body)
}

// opsAccepts is the resource a token must carry at the operations
// endpoint: Operations.Resource when set (CO-OPS2-02), else what the API
// accepts.
func (s *Server) opsAccepts(res string) bool {
	if r := s.opts.Operations.Resource; r != "" {
		return res == r
	}
	return res == "" || res == s.apiOrigin || res == s.opts.API.Resource
}

// mayUse applies OPS 3.2 (CO-OPS3-14..16, A-39).
func (s *Server) mayUse(op *fakeOp, a *auth) bool {
	t := a.tok
	if t.clientID != op.clientID || t.sub != op.sub {
		return false
	}
	if t.sessionID == op.sessionID {
		return true
	}
	return op.account != "" && a.signedIn && a.account == op.account
}

func (s *Server) readOp(op *fakeOp, now time.Time) (int, any) {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	s.progressLocked(op, now)
	return http.StatusOK, s.opMapLocked(op)
}

func (s *Server) cancelOp(op *fakeOp, now time.Time) (int, any) {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	s.progressLocked(op, now)
	switch op.state {
	case "proposed": // CO-OPS7-01
		setStateLocked(op, "cancelled")
		op.result = map[string]any{"summary": "Declined. Nothing was done."}
	case "in_progress": // CO-OPS7-02: stays in_progress until known
		op.cancelReq = true
	}
	return http.StatusOK, s.opMapLocked(op) // CO-OPS7-03: final as it is
}

// confirmOp applies OPS 5.2. It reports false when it answered a token
// error itself.
func (s *Server) confirmOp(w http.ResponseWriter, r *http.Request, a *auth, op *fakeOp, now time.Time) (int, any, bool) {
	x := exchangeOf(r)
	var req struct {
		Revision   *int   `json:"revision"`
		ApprovedBy string `json:"approved_by"`
	}
	if json.Unmarshal(x.body, &req) != nil || req.Revision == nil ||
		(req.ApprovedBy != "user" && req.ApprovedBy != "standing_permission") {
		return http.StatusBadRequest, oauthError("invalid_request", `the body must be {"revision": n, "approved_by": "user" | "standing_permission"}`), true
	}
	s.ops.mu.Lock()
	scopes := slices.Clone(op.scopes)
	s.ops.mu.Unlock()
	if len(scopes) > 0 && !s.require(w, r, a, scopes...) { // CO-OPS5-02
		return 0, nil, false
	}
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	switch s.confirmLocked(op, *req.Revision, req.ApprovedBy, "endpoint", now) {
	case "terms_changed": // CO-OPS5-03
		return http.StatusConflict, map[string]any{"error": "terms_changed",
			"error_description": "the terms changed: approve the current revision", "operation": s.opMapLocked(op)}, true
	case "user_approval_required": // CO-OPS5-04
		return http.StatusForbidden, oauthError("user_approval_required", "this operation needs the User's approval of this revision"), true
	}
	return http.StatusOK, s.opMapLocked(op), true
}

// confirmLocked applies a confirm of revision rev approved by by, from the
// endpoint or the website (via), once ownership and scopes are checked:
// an operation that isn't proposed (or whose revision expired) is left as
// it is (CO-OPS5-05), then the revision is checked (terms_changed), then
// approved_by (user_approval_required); otherwise the confirmation is
// recorded, the operation moves to in_progress (CO-OPS5-06) and the
// performer acts. It returns the error code, "" for none. Both channels
// confirm through it, under the one lock, so an operation is performed at
// most once whichever channels confirm it, how often (CO-OPS6-02, OPS 4.4).
func (s *Server) confirmLocked(op *fakeOp, rev int, by, via string, now time.Time) string {
	s.progressLocked(op, now)
	switch {
	case op.state != "proposed":
		return ""
	case rev != op.latest().n:
		return "terms_changed"
	case by == "standing_permission" && op.uar:
		return "user_approval_required"
	}
	op.confirmed = &opConfirmation{revision: op.latest().n, approvedBy: by, at: now, via: via}
	setStateLocked(op, "in_progress")
	s.performLocked(op, now)
	return ""
}

func (s *Server) opError(w http.ResponseWriter, r *http.Request, status int, code, desc string, op map[string]any) {
	exchangeOf(r).errorCode = code
	body := oauthError(code, desc)
	if op != nil {
		body["operation"] = op
	}
	s.writeJSON(w, r, status, body)
}

func (s *Server) confirmHold() chan struct{} {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	return s.ops.hold
}

// The jacket exchange (operations-1.md section 3).

type jacket struct {
	name  string
	price string // difference to the Stormline Jacket (M), USD
}

var jackets = map[string]jacket{
	"stormline-m":            {"Stormline Jacket (M)", "0.00"},
	"stormline-l":            {"Stormline Jacket (L)", "0.00"},
	"stormline-insulated-m":  {"Stormline Insulated Jacket (M)", "70.00"},
	"stormline-insulated-l":  {"Stormline Insulated Jacket (L)", "70.00"},
	"stormline-insulated-xl": {"Stormline Insulated Jacket (XL)", "85.00"},
}

// nextSize is the SKU a new revision moves to (Operations().Revise).
var nextSize = map[string]string{
	"stormline-m": "stormline-l", "stormline-insulated-m": "stormline-insulated-l",
	"stormline-insulated-l": "stormline-insulated-xl", "stormline-insulated-xl": "stormline-insulated-m",
	"stormline-l": "stormline-m",
}

// exchangeTerms are the terms of an exchange and the summary that states
// every one of them (CO-OPS3-06, CO-OPS3-07).
func exchangeTerms(order, item, sku string) (string, map[string]any) {
	j := jackets[sku]
	terms := map[string]any{
		"order_id":         order,
		"item_id":          item,
		"replacement_sku":  sku,
		"price_difference": map[string]any{"amount": j.price, "currency": "USD"},
	}
	cost := "at no extra cost (0.00 USD)"
	if j.price != "0.00" {
		cost = "for $" + j.price + " more (USD), charged to the card used for the order"
	}
	summary := fmt.Sprintf("Exchange the Stormline Jacket (M) (item %s) on order %s for the %s (%s), %s.", item, order, j.name, sku, cost)
	return summary, terms
}

func exchangePerform(terms map[string]any) (string, map[string]any) {
	sku, _ := terms["replacement_sku"].(string)
	pd, _ := terms["price_difference"].(map[string]any)
	amount, _ := pd["amount"].(string)
	charge := "Nothing was charged."
	if amount != "0.00" {
		charge = "$" + amount + " was charged to the card ending in 4242."
	}
	return fmt.Sprintf("Exchange placed. The %s ships today, and a return label for the original jacket was emailed. %s", jackets[sku].name, charge),
		map[string]any{"return_id": newID("rtn_", 4)}
}

// serveExchange answers POST /orders/{id}/exchanges (OPS 4.1).
func (s *Server) serveExchange(w http.ResponseWriter, r *http.Request, a *auth, order string, req map[string]any) {
	item, _ := req["item_id"].(string)
	if item == "" {
		item = "itm_4Qa"
	}
	sku, _ := req["replacement_sku"].(string)
	if sku == "" {
		sku = "stormline-insulated-m"
	}
	if _, ok := jackets[sku]; !ok {
		exchangeOf(r).errorCode = "invalid_request"
		s.writeJSON(w, r, http.StatusBadRequest, oauthError("invalid_request", "unknown replacement_sku"))
		return
	}
	summary, terms := exchangeTerms(order, item, sku)
	key := order + " " + item
	if !s.clientListsOperations(a.tok.clientID) {
		if s.opts.Operations.RequireOperations { // CO-OPS2-04
			s.writeResourceError(w, r, &protoError{code: "extension_required", desc: "exchanges need the operations extension", extension: "operations"})
			return
		}
		// CO-OPS2-03: no operation; performed as without the extension.
		s.ops.mu.Lock()
		s.ops.actions = append(s.ops.actions, PerformedAction{Key: key, Terms: terms, Time: s.clock.Now()})
		s.ops.mu.Unlock()
		s.writeJSON(w, r, http.StatusCreated, map[string]any{
			"exchange_id": newID("exc_", 6), "order_id": order, "status": "requested", "request": req,
		})
		return
	}
	account := ""
	if a.signedIn {
		account = a.account
	}
	x := exchangeOf(r)
	idem := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(idem) > maxIdempotencyKey {
		x.errorCode = "invalid_request"
		s.writeJSON(w, r, http.StatusBadRequest, oauthError("invalid_request", "the Idempotency-Key is too long"))
		return
	}
	fault := FaultNone
	if f := s.opts.Operations.ProposeFaults; f != nil {
		s.ops.mu.Lock()
		s.ops.proposeAttempts[key]++
		attempt := s.ops.proposeAttempts[key]
		s.ops.mu.Unlock()
		fault = f(OperationRequest{Kind: "propose", Action: key, Attempt: attempt, IdempotencyKey: idem})
	}
	if s.injectFault(w, r, fault) {
		return
	}
	fingerprint, _ := json.Marshal(map[string]any{"order": order, "request": req}) // members sorted
	op, err := s.propose(a.tok.sessionID, a.tok.clientID, a.tok.sub, account, []string{s.signin.read, s.signin.write}, operationProposal{
		Key: key, IDPrefix: "exc_", Summary: summary, Terms: terms, Perform: exchangePerform,
		IdempotencyKey: idem, Fingerprint: string(fingerprint),
	})
	if err != nil {
		x.errorCode = "invalid_request"
		s.writeJSON(w, r, http.StatusUnprocessableEntity, oauthError("invalid_request", "the Idempotency-Key was used for another request"))
		return
	}
	s.ops.mu.Lock()
	body := map[string]any{"operation": s.opMapLocked(op)}
	s.ops.mu.Unlock()
	switch fault {
	case FaultLoseResponse:
		x.errorCode = "response_lost"
		panic(http.ErrAbortHandler)
	case Fault5xxAfter:
		x.errorCode = "server_error"
		s.writeJSON(w, r, http.StatusInternalServerError, oauthError("server_error", "injected by poppytest"))
		return
	}
	s.writeJSON(w, r, http.StatusAccepted, body) // CO-OPS4-02
}

// Operations are the run-time knobs and records of the operations
// extension, from [Server.Operations]: what was proposed and performed
// (Get, All, Performed), the Company's side of an operation (Revise,
// Resolve, MutateRevision), and the performer (SetPerform, HoldConfirms).
type Operations struct{ s *Server }

// Operations returns the operations extension's knobs and records.
func (s *Server) Operations() *Operations { return &s.areas.operations }

// Revise issues the next revision of a proposed operation: an
// exchange moves to the next size (M → L → XL), with a new expires_at
// (CO-OPS3-05). It returns the new revision number, or an error for an
// unknown operation or one that is no longer proposed (CO-OPS3-13).
func (k *Operations) Revise(id string) (int, error) {
	s := k.s
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	defer st.mu.Unlock()
	op := st.ops[id]
	if op == nil {
		return 0, fmt.Errorf("poppytest: no operation %q", id)
	}
	s.expireLocked(op, now)
	if op.state != "proposed" {
		return 0, fmt.Errorf("poppytest: operation %s is %s: its terms can't change", id, op.state)
	}
	cur := op.latest()
	next := opRevision{n: cur.n + 1, expires: s.expiry(now)}
	if !next.expires.After(cur.expires) {
		next.expires = cur.expires.Add(time.Second)
	}
	if sku, ok := cur.terms["replacement_sku"].(string); ok && nextSize[sku] != "" {
		order, _ := cur.terms["order_id"].(string)
		item, _ := cur.terms["item_id"].(string)
		next.summary, next.terms = exchangeTerms(order, item, nextSize[sku])
	} else {
		next.terms = cloneTerms(cur.terms)
		if next.terms == nil {
			next.terms = map[string]any{}
		}
		next.terms["revision_note"] = fmt.Sprintf("revised %d", next.n)
		next.summary = cur.summary + fmt.Sprintf(" (revised %d)", next.n)
	}
	op.revs = append(op.revs, next)
	return next.n, nil
}

// MutateRevision makes every later answer about the operation show its
// current revision with a changed summary: a negative knob that breaks
// CO-OPS3-11 so a test can see the agent refuse it (PA-OPS3-09).
func (k *Operations) MutateRevision(id string) {
	s := k.s
	s.ops.mu.Lock()
	s.ops.mutateRev[id] = true
	s.ops.mu.Unlock()
}

// SetPerform changes what the performer does with operations confirmed
// from now on.
func (k *Operations) SetPerform(m PerformMode) {
	s := k.s
	s.ops.mu.Lock()
	s.ops.perform = m
	s.ops.mu.Unlock()
}

// Resolve ends an operation left in_progress (PerformUnknown, or
// PerformSlow before its time): succeeded performs it, failed and
// cancelled record that nothing was done.
func (k *Operations) Resolve(id, state string) error {
	s := k.s
	st := &s.ops
	st.mu.Lock()
	defer st.mu.Unlock()
	op := st.ops[id]
	switch {
	case op == nil:
		return fmt.Errorf("poppytest: no operation %q", id)
	case op.state != "in_progress":
		return fmt.Errorf("poppytest: operation %s is %s, not in_progress", id, op.state)
	}
	switch state {
	case "succeeded":
		s.completeLocked(op)
	case "failed":
		setStateLocked(op, "failed")
		op.result = map[string]any{"summary": "The exchange could not be placed. Nothing was shipped or charged."}
	case "cancelled":
		setStateLocked(op, "cancelled")
		op.result = map[string]any{"summary": "Stopped before the exchange was placed. Nothing was shipped or charged."}
	default:
		return fmt.Errorf("poppytest: Operations().Resolve: %q is not succeeded, failed or cancelled", state)
	}
	return nil
}

// HoldConfirms makes confirms wait, once authenticated and logged, until
// the returned release is called; release lets them proceed (the Company
// then records and performs them as usual). It lets a test act while a
// confirm is in flight, such as killing the agent's process.
func (k *Operations) HoldConfirms() (release func()) {
	s := k.s
	ch := make(chan struct{})
	s.ops.mu.Lock()
	s.ops.hold = ch
	s.ops.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.ops.mu.Lock()
			if s.ops.hold == ch {
				s.ops.hold = nil
			}
			s.ops.mu.Unlock()
			close(ch)
		})
	}
}

// Get returns the fake's record of an operation.
func (k *Operations) Get(id string) (OperationInfo, bool) {
	s := k.s
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	defer st.mu.Unlock()
	op := st.ops[id]
	if op == nil {
		return OperationInfo{}, false
	}
	s.progressLocked(op, now)
	return s.infoLocked(op), true
}

// All returns every operation, in order of proposal.
func (k *Operations) All() []OperationInfo {
	s := k.s
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]OperationInfo, 0, len(st.order))
	for _, id := range st.order {
		s.progressLocked(st.ops[id], now)
		out = append(out, s.infoLocked(st.ops[id]))
	}
	return out
}

func (s *Server) infoLocked(op *fakeOp) OperationInfo {
	rev := op.latest().n
	if op.confirmed != nil {
		rev = op.confirmed.revision
	}
	via := ""
	if op.confirmed != nil {
		via = op.confirmed.via
	}
	return OperationInfo{ID: op.id, Revision: rev, State: op.state, SessionID: op.sessionID, Account: op.account,
		Performed: op.performed, Confirms: op.counts["confirm"], Reads: op.counts["read"], Cancels: op.counts["cancel"],
		WebsiteConfirms: op.counts["website_confirm"], WebsiteCancels: op.counts["website_cancel"], ConfirmedVia: via,
		Proposals: op.counts["propose"], IdempotencyKeys: slices.Clone(op.idemKeys),
		JSON: s.opJSONLocked(op)}
}

// Performed returns the backend's action log: every action carried
// out, by an operation or directly.
func (k *Operations) Performed() []PerformedAction {
	s := k.s
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	out := slices.Clone(s.ops.actions)
	for i := range out {
		out[i].Terms = cloneTerms(out[i].Terms)
	}
	return out
}

func cloneTerms(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// injectFault carries out an injected fault of an operations request:
// FaultCut cuts the connection, Fault503 answers 503 with Retry-After. It
// reports whether the request was answered (or cut) that way.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, fault OperationFault) bool {
	x := exchangeOf(r)
	switch fault {
	case FaultCut:
		x.errorCode = "connection_cut"
		panic(http.ErrAbortHandler)
	case Fault503:
		x.errorCode = "server_error"
		w.Header().Set("Retry-After", "1")
		s.writeJSON(w, r, http.StatusServiceUnavailable, oauthError("server_error", "injected by poppytest"))
		return true
	}
	return false
}
