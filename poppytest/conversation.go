package poppytest

// The poppy conversation endpoint (spec 7) and its scriptable Company Agent.
//
// Each conversation is an ordered log of entries. An entry is an event
// (with an ID, kept until PurgeBefore drops it) or a text-delta piece (no
// ID, streamed only, never in a JSON read). Readers hold an absolute index
// into the log: JSON reads and SSE streams of the same conversation walk the
// same entries, so streamed and JSON reads of the same events decode to the
// same events (CO-7.6-02). Appending closes the conversation's changed
// channel, waking every held read and stream at once.
//
// Ownership (spec 7.2, A-22): a conversation belongs to the client_id and
// User ID that started it until a request on it comes with a token signed in
// to an account; from then on it belongs to that account (any User ID of the
// same client_id signed in to it may continue), a token of the starting User
// that isn't signed in to that account gets 403 sign_in_required
// (CO-7.11-06), and anyone else 404 conversation_not_found.
//
// Message IDs are remembered per (client_id, User ID) for as long as the
// fake runs: the same ID with the same content (the message object compared
// as canonical JSON, and parent_conversation_id; not wait or cursor, A-23)
// returns the original status and body; different content gets 409
// message_id_conflict (CO-7.3-02..04).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/markup"
	"github.com/poppyproto/poppy/internal/tzname"
	"github.com/poppyproto/poppy/internal/wire"
)

// ConversationOptions configures the conversation endpoint
// (Options.Conversations). The zero value is a Company that answers JSON
// reads only, with the default Company Agent.
type ConversationOptions struct {
	// Streaming answers a read that accepts text/event-stream with a
	// server-sent event stream (CO-7.6-01). Without it, every read is JSON.
	Streaming bool
	// TextDeltas makes the default Company Agent stream each reply as
	// text-delta pieces before the message (CO-7.6-05).
	TextDeltas bool
	// MaxWait caps the wait of a read (CO-7.5-05). Default 30 s.
	MaxWait time.Duration
	// PageSize is the most events one JSON read returns; more set has_more
	// (PA-7.5-07). Default 100.
	PageSize int
	// CloseStreamAfter > 0 closes each SSE stream after that many events
	// (text-delta pieces don't count) (CO-7.6-03).
	CloseStreamAfter int
	// StreamIgnoresCursor makes a stream start after its Last-Event-ID, or
	// at the beginning without one, ignoring any cursor query: a Company
	// that reads spec 7.6's "Last-Event-ID … in place of cursor" as the
	// only way to resume a stream. JSON reads still take the
	// cursor query.
	StreamIgnoresCursor bool
	// Heartbeats interleaves ": ping" comment lines and splits each data
	// field over two lines in streams (PA-7.6-03).
	Heartbeats bool
	// OddIDs issues Conversation, event and message IDs that use the whole
	// alphabet and length range without prefixes: "x", "-_-", a
	// 256-character ID, then random ones (PA-7.2-04).
	OddIDs bool
	// Resource, if set, is the poppy protocol entry's "resource", and the
	// endpoint then accepts only tokens issued for it (CO-3-12).
	Resource string
	// Agent scripts the Company Agent: it is called for each message the
	// Personal Agent sends (after the message is recorded), while the
	// status is working. Nil is the default agent: it replies "Thanks, I
	// have noted that." (in pieces with TextDeltas) and goes idle.
	Agent func(*Turn)
	// ReplyDelay runs Agent that long (real time) after the message, in the
	// background, instead of before the POST is answered.
	ReplyDelay time.Duration
	// Retention > 0 keeps only the latest that many events of each
	// conversation; a cursor for a dropped event gets cursor_expired.
	Retention int
	// Noise adds "context" and "x_new" to every Company message and injects
	// an event of unknown type "poll" after each reply (PA-7.4-11,
	// PA-7.5-04).
	Noise bool
}

// ConversationFaults are injected at random into conversation traffic,
// for reliability tests. Probabilities are in [0, 1].
type ConversationFaults struct {
	// Seed seeds the fault dice, for reproducible runs.
	Seed uint64
	// CutStream cuts an SSE stream after a frame, at random, with this
	// probability per frame; CutMidEvent makes the cut fall in the middle
	// of the next frame.
	CutStream   float64
	CutMidEvent bool
	// Replay, on a reconnect with Last-Event-ID (or a read with a cursor),
	// first sends again up to this many events before it (PA-7.5-09).
	Replay int
	// LosePOST answers a message POST, after the message is recorded, by
	// closing the connection without a response, with this probability.
	LosePOST float64
}

// Turn is one turn of the scripted Company Agent: the message it answers
// and what it may do.
type Turn struct {
	s         *Server
	c         *fconv
	sessionID string
	// ConversationID is the conversation.
	ConversationID string
	// Message is the Personal Agent's message, as received.
	Message IncomingMessage
	// SignedIn, Scopes and Account describe the token the message came with.
	SignedIn bool
	Scopes   []string
	Account  string
}

// IncomingMessage is a Personal Agent message as the fake received it.
type IncomingMessage struct {
	ID      string
	Sender  string
	Text    string
	Data    json.RawMessage
	Context map[string]any
	Raw     json.RawMessage
}

// Reply is a Company message the fake appends.
type Reply struct {
	// Text and Data are the message; at least one is needed (CO-7.4-02).
	Text string
	Data any
	// Sender is "agent" or "human"; default: the conversation's responder.
	Sender string
	// Deltas are text-delta pieces streamed before the message (CO-7.6-05).
	Deltas []string
	// Operation is put in the message's "operation" member as is
	// (operations extension, OPS 4).
	Operation json.RawMessage
	// Fields are extra members of the message.
	Fields map[string]any
}

// Reply appends a Company message.
func (t *Turn) Reply(r Reply) { t.s.convAppendMessage(t.c, r) }

// ProposeOperation proposes an operation for an action the Company Agent
// would perform, for the Session the message came from (OPS 4): reply with
// it in Reply.Operation, next to the text (CO-OPS4-05). Proposing the same
// key again returns the open operation. It fails when the agent doesn't
// list the operations extension.
func (t *Turn) ProposeOperation(key, summary string, terms map[string]any) (json.RawMessage, error) {
	return t.s.proposeOperation(t.sessionID, operationProposal{Key: key, Summary: summary, Terms: terms})
}

// Say appends a Company message with text.
func (t *Turn) Say(text string) { t.Reply(Reply{Text: text}) }

// RequireScopes reports whether the message's token is signed in with
// every scope in need. If not, it appends an authorization event
// (sign_in_required, or insufficient_scope naming need, A-21) and a message
// asking for it (CO-7.11-01, CO-7.11-02). The check is redone on every turn:
// it clears once a token with the scopes sends a message.
func (t *Turn) RequireScopes(need ...string) bool {
	if t.SignedIn && covers(t.Scopes, need) {
		return true
	}
	t.s.convAuthorization(t.c, t.SignedIn, need)
	return false
}

// Do records an account action the Company Agent carried out, such as
// "exchange ord_7Hk2", in ConversationInfo.Actions. Closing the
// conversation cancels none of them (CO-7.12-04).
func (t *Turn) Do(action string) {
	c := t.s.cs()
	c.mu.Lock()
	t.c.actions = append(t.c.actions, action)
	c.mu.Unlock()
}

// RequestUser appends a user_requested event (CO-7.10-05).
func (t *Turn) RequestUser(reason string) { t.s.Conversations().RequestUser(t.ConversationID, reason) }

// Handoff hands the conversation to a person on the Company Agent's own
// initiative: the status becomes queued (PA-7.9-05).
func (t *Turn) Handoff() { t.s.convHandoff(t.c) }

// Close closes the conversation on the Company's side.
func (t *Turn) Close() { t.s.Conversations().Close(t.ConversationID) }

func covers(have, need []string) bool {
	for _, n := range need {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// fconv is one conversation held by the fake.
type fconv struct {
	id                string
	clientID, sub     string
	account           string // set once the conversation used an account
	parent            string // for a Direct Conversation
	direct            string // the open Direct Conversation of a parent
	status, responder string
	handoffPending    bool
	context           map[string]any
	entries           []centry
	first             int            // absolute index of entries[0]
	index             map[string]int // event ID → absolute index
	purged            map[string]bool
	changed           chan struct{}
	messages          []IncomingMessage
	actions           []string
}

type centry struct {
	id    string // "" for a text-delta piece
	typ   string
	raw   []byte // the event JSON
	delta bool
}

// sentMsg remembers an accepted message ID (CO-7.3-02..04).
type sentMsg struct {
	content    string // canonical JSON of the message and parent
	conv       string
	status     int
	body       []byte
	conflicted bool // a different content was refused under this ID
}

type msgKey struct{ clientID, sub, id string }

// convState is the conversation endpoint's state.
type convState struct {
	once     sync.Once
	mu       sync.Mutex
	convs    map[string]*fconv
	msgs     map[msgKey]*sentMsg
	odd      int
	faults   ConversationFaults
	dice     *rand.Rand
	loseNext int
	cutNext  int            // cut the next stream after this many frames; 0: none
	wg       sync.WaitGroup // background turns (ReplyDelay)
	closed   bool
}

func (s *Server) cs() *convState {
	c := &s.cstate
	c.once.Do(func() {
		c.convs = map[string]*fconv{}
		c.msgs = map[msgKey]*sentMsg{}
		c.dice = rand.New(rand.NewPCG(1, 2))
	})
	return c
}

// Conversations are the run-time knobs and records of the conversation
// endpoint (spec 7), from [Server.Conversations]: the Company's side of a
// conversation (Say, SetState, JoinHuman, Close, …), what the fake holds
// (Get, All), and faults (SetFaults, LoseResponses, Cut). A method naming a
// conversation the fake doesn't hold fails the test (NewServer) or panics
// (New).
type Conversations struct{ s *Server }

// Conversations returns the conversation endpoint's knobs and records.
func (s *Server) Conversations() *Conversations { return &s.areas.conversations }

// SetFaults replaces the injected conversation faults.
func (k *Conversations) SetFaults(f ConversationFaults) {
	s := k.s
	c := s.cs()
	c.mu.Lock()
	c.faults = f
	c.dice = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	c.mu.Unlock()
}

// LoseResponses records the next n conversation POSTs (starts
// and messages) and then closes their connections without an answer: the
// Company has the message, the client never hears (PA-7.3-04, PA-7.3-05).
func (k *Conversations) LoseResponses(n int) {
	s := k.s
	c := s.cs()
	c.mu.Lock()
	c.loseNext += n
	c.mu.Unlock()
}

// Cut cuts the next SSE stream, abruptly, after n frames
// (text-delta pieces included), as a network failure would (PA-7.6-08).
func (k *Conversations) Cut(n int) {
	s := k.s
	c := s.cs()
	c.mu.Lock()
	c.cutNext = max(n, 1)
	c.mu.Unlock()
}

func (c *convState) roll(p float64) bool {
	if p <= 0 {
		return false
	}
	return c.dice.Float64() < p
}

// waitTurns waits for background turns; Close calls it.
func (s *Server) waitTurns() {
	c := s.cs()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}

// idRE is the alphabet and length of every protocol ID (spec 7.2).
var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// validID reports whether id is 1 to 256 characters of [A-Za-z0-9_-]
// (spec 7.2).
func validID(id string) bool { return idRE.MatchString(id) }

// newConvID returns a Company-chosen ID with prefix (CO-7.2-06), or an odd
// one with OddIDs (PA-7.2-04). Called with c.mu held.
func (s *Server) newConvID(prefix string) string {
	c := &s.cstate
	if !s.opts.Conversations.OddIDs {
		return newID(prefix, 9)
	}
	c.odd++
	switch c.odd {
	case 1:
		return "x"
	case 2:
		return "-_-"
	case 3:
		return strings.Repeat("Z", 255) + "9"
	}
	return newID("", 7)
}

func (s *Server) convMaxWait() time.Duration {
	if w := s.opts.Conversations.MaxWait; w > 0 {
		return w
	}
	return 30 * time.Second
}

func (s *Server) convPageSize() int {
	if n := s.opts.Conversations.PageSize; n > 0 {
		return n
	}
	return 100
}

// convAccepts is the resource rule of the conversation endpoint (CO-3-12).
func (s *Server) convAccepts(res string) bool {
	if r := s.opts.Conversations.Resource; r != "" {
		return res == r
	}
	return res == "" || res == s.apiOrigin
}

// convError answers a conversation error (spec 7.13, CO-7.13-01).
func (s *Server) convError(w http.ResponseWriter, r *http.Request, status int, code, desc string, extra map[string]any) {
	x := exchangeOf(r)
	x.errorCode = code
	body := oauthError(code, desc)
	for k, v := range extra {
		body[k] = v
	}
	s.writeJSON(w, r, status, body)
}

func (s *Server) convNotFound(w http.ResponseWriter, r *http.Request) {
	// CO-7.13-02: unknown and foreign conversations answer byte-identically.
	s.convError(w, r, http.StatusNotFound, "conversation_not_found", "", nil)
}

// serveConversation routes the conversation endpoint (spec 7.2).
func (s *Server) serveConversation(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if s.opts.Tokens.RotateNonce {
		w.Header().Set("DPoP-Nonce", s.rotateNonce(x.host))
	}
	a, ok := s.authenticate(w, r, s.convAccepts)
	if !ok {
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/poppy/conversations")
	if strings.Contains(r.URL.Path, "//") {
		s.violate(x.idx, "PA-7.2-01", "conversation URL with an empty segment: %s", r.URL.Path)
		s.notFound(w, r)
		return
	}
	seg := strings.Split(strings.Trim(rest, "/"), "/")
	if rest == "" || rest == "/" {
		seg = nil
	}
	post := r.Method == http.MethodPost
	if post && !wire.IsJSON(r.Header.Get("Content-Type")) {
		s.violate(x.idx, "PA-7.2-01", "conversation POST without Content-Type: application/json")
		s.convError(w, r, http.StatusBadRequest, "invalid_request", "the body must be application/json", nil)
		return
	}
	switch {
	case len(seg) == 0 && post:
		s.convStart(w, r, a)
	case len(seg) == 2 && post && seg[1] == "messages":
		s.convMessage(w, r, a, seg[0])
	case len(seg) == 2 && r.Method == http.MethodGet && seg[1] == "events":
		s.convEvents(w, r, a, seg[0])
	case len(seg) == 2 && post && seg[1] == "handoff":
		s.convHandoffReq(w, r, a, seg[0])
	case len(seg) == 2 && post && seg[1] == "close":
		s.convCloseReq(w, r, a, seg[0])
	default:
		s.notFound(w, r)
	}
}

// owned finds conversation id for a, applying spec 7.2 ownership. It
// answers the error itself and returns nil when the request is refused.
// Called with c.mu held.
func (s *Server) owned(w http.ResponseWriter, r *http.Request, a *auth, id string) *fconv {
	cv := s.cstate.convs[id]
	if cv == nil || cv.clientID != a.tok.clientID {
		s.convNotFound(w, r) // CO-7.2-01
		return nil
	}
	if cv.account == "" {
		if cv.sub != a.tok.sub {
			s.convNotFound(w, r) // CO-7.2-02
			return nil
		}
		if a.signedIn {
			cv.account = a.account // it now uses the account
		}
		return cv
	}
	switch {
	case a.signedIn && a.account == cv.account:
		return cv
	case a.signedIn:
		s.convNotFound(w, r) // CO-7.2-03: another account
	case cv.sub == a.tok.sub:
		// CO-7.11-06: the same User, not signed in to the account.
		s.writeResourceError(w, r, &protoError{code: "sign_in_required", desc: "this conversation uses the User's account", challenge: true})
	default:
		s.convNotFound(w, r)
	}
	return nil
}

// postBody is a start or message POST body.
type postBody struct {
	Parent  *string         `json:"parent_conversation_id"`
	Message json.RawMessage `json:"message"`
}

var (
	localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)
)

// checkPAMessage validates a Personal Agent message (spec 7.4, A-30) and
// records the PA rule it breaks.
func (s *Server) checkPAMessage(idx int, raw json.RawMessage) (IncomingMessage, string) {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || m == nil {
		s.violate(idx, "PA-7.3-01", "the body has no message object")
		return IncomingMessage{}, "the body needs a message object"
	}
	in := IncomingMessage{Raw: bytes.Clone(raw)}
	json.Unmarshal(m["id"], &in.ID)
	json.Unmarshal(m["sender"], &in.Sender)
	if !validID(in.ID) {
		s.violate(idx, "PA-7.2-02", "message id %q breaks the alphabet or length rules", truncate(in.ID))
		return in, "message id must be 1 to 256 characters of A-Z a-z 0-9 - _"
	}
	if in.Sender != "agent" && in.Sender != "human" {
		s.violate(idx, "PA-7.8-01", "message sender %q is not agent or human", truncate(in.Sender))
		return in, "sender must be agent or human"
	}
	_, hasText := m["text"]
	_, hasData := m["data"]
	_, hasCtx := m["context"]
	if !hasText && !hasData && !hasCtx {
		s.violate(idx, "PA-7.4-01", "message with none of text, data or context")
		return in, "a message needs text, data or context"
	}
	if hasText && json.Unmarshal(m["text"], &in.Text) != nil {
		return in, "text must be a string"
	}
	if hasData {
		var obj map[string]any
		if json.Unmarshal(m["data"], &obj) != nil || obj == nil {
			s.violate(idx, "PA-7.4-03", "data is not a JSON object")
			return in, "data must be a JSON object"
		}
		in.Data = bytes.Clone(m["data"])
	}
	if hasCtx {
		var ctx map[string]json.RawMessage
		if json.Unmarshal(m["context"], &ctx) != nil || ctx == nil {
			return in, "context must be a JSON object"
		}
		in.Context = map[string]any{}
		for k, v := range ctx {
			var val any
			json.Unmarshal(v, &val)
			in.Context[k] = val
		}
		if v, ok := ctx["locale"]; ok {
			var l string
			if json.Unmarshal(v, &l) != nil || !localeRE.MatchString(l) {
				s.violate(idx, "PA-7.4-05", "context.locale is not an RFC 5646 language tag")
				return in, "context.locale must be an RFC 5646 language tag"
			}
		}
		if v, ok := ctx["time_zone"]; ok {
			var tz string
			// The names of the tz database, not the host's zoneinfo,
			// which a scratch image lacks.
			if json.Unmarshal(v, &tz) != nil || !tzname.Valid(tz) {
				s.violate(idx, "PA-7.4-06", "context.time_zone is not an IANA time zone name")
				return in, "context.time_zone must be an IANA time zone name"
			}
		}
		if v, ok := ctx["user_available"]; ok {
			var b bool
			if json.Unmarshal(v, &b) != nil {
				s.violate(idx, "PA-7.4-07", "context.user_available is not a boolean")
				return in, "context.user_available must be a boolean"
			}
		}
	}
	return in, ""
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// canonical returns v's JSON with object keys sorted, for content checks.
func canonical(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v) // encoding/json sorts map keys
	return string(b)
}

// readParams are the cursor and wait of a read, or of a POST (spec 7.3).
type readParams struct {
	cursor    string
	hasCursor bool
	wait      time.Duration
	hasWait   bool
}

func (s *Server) parseRead(r *http.Request) (readParams, string) {
	var p readParams
	q := r.URL.Query()
	if q.Has("cursor") {
		p.cursor, p.hasCursor = q.Get("cursor"), true
	}
	if q.Has("wait") {
		f, err := strconv.ParseFloat(q.Get("wait"), 64)
		if err != nil || f < 0 {
			return p, "wait must be a number of seconds"
		}
		p.wait, p.hasWait = min(time.Duration(f*float64(time.Second)), s.convMaxWait()), true
	}
	return p, ""
}

// convStart answers POST {endpoint} (spec 7.3, 7.10).
func (s *Server) convStart(w http.ResponseWriter, r *http.Request, a *auth) {
	s.convPost(w, r, a, "")
}

// convMessage answers POST {endpoint}/{id}/messages.
func (s *Server) convMessage(w http.ResponseWriter, r *http.Request, a *auth, id string) {
	s.convPost(w, r, a, id)
}

func (s *Server) convPost(w http.ResponseWriter, r *http.Request, a *auth, id string) {
	x := exchangeOf(r)
	var body postBody
	if json.Unmarshal(x.body, &body) != nil {
		s.convError(w, r, http.StatusBadRequest, "invalid_request", "the body is not a JSON object", nil)
		return
	}
	in, bad := s.checkPAMessage(x.idx, body.Message)
	if bad != "" {
		s.convError(w, r, http.StatusBadRequest, "invalid_request", bad, nil)
		return
	}
	rp, bad := s.parseRead(r)
	if bad != "" {
		s.convError(w, r, http.StatusBadRequest, "invalid_request", bad, nil)
		return
	}
	parent := ""
	if body.Parent != nil {
		parent = *body.Parent
	}
	if id != "" && body.Parent != nil {
		s.convError(w, r, http.StatusBadRequest, "invalid_request", "parent_conversation_id belongs only in a start", nil)
		return
	}
	content := canonical(body.Message) + "\x00" + parent
	c := s.cs()
	c.mu.Lock()
	key := msgKey{a.tok.clientID, a.tok.sub, in.ID}
	if prev := c.msgs[key]; prev != nil {
		if prev.content != content || (id != "" && prev.conv != id) {
			if prev.conflicted {
				s.violate(x.idx, "PA-7.3-06", "different content sent again under message ID %q, refused before with message_id_conflict", truncate(in.ID))
			}
			prev.conflicted = true
			c.mu.Unlock()
			s.convError(w, r, http.StatusConflict, "message_id_conflict", "this message ID was accepted with different content", nil) // CO-7.3-04
			return
		}
		cv := c.convs[prev.conv]
		c.mu.Unlock()
		// CO-7.3-02, CO-7.3-03: the original answer, nothing added.
		if rp.hasWait || rp.hasCursor {
			s.convReplyRead(w, r, a, cv, prev.status, rp)
			return
		}
		x.sessionID = a.tok.sessionID
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(prev.status)
		w.Write(prev.body)
		return
	}
	var cv *fconv
	status := http.StatusAccepted
	if id == "" {
		status = http.StatusCreated
		if parent != "" {
			p := s.owned(w, r, a, parent)
			switch {
			case p == nil:
				c.mu.Unlock()
				return
			case p.parent != "": // a Direct can't be a parent
				c.mu.Unlock()
				s.convNotFound(w, r)
				return
			case p.status == "closed":
				c.mu.Unlock()
				s.convError(w, r, http.StatusConflict, "conversation_closed", "the parent conversation is closed", nil) // CO-7.10-01
				return
			case p.direct != "":
				d := p.direct
				c.mu.Unlock()
				s.convError(w, r, http.StatusConflict, "direct_conversation_open", "the parent has an open Direct Conversation", map[string]any{"conversation_id": d}) // CO-7.10-04
				return
			}
		}
		cv = &fconv{id: s.newConvID("cnv_"), clientID: a.tok.clientID, sub: a.tok.sub, parent: parent,
			status: "working", responder: "agent", context: map[string]any{}, index: map[string]int{},
			purged: map[string]bool{}, changed: make(chan struct{})}
		if a.signedIn {
			cv.account = a.account
		}
		c.convs[cv.id] = cv
		if parent != "" {
			p := c.convs[parent]
			p.direct = cv.id
			s.appendLocked(p, map[string]any{"type": "direct_opened", "conversation_id": cv.id}) // CO-7.10-06
		}
	} else {
		cv = s.owned(w, r, a, id)
		if cv == nil {
			c.mu.Unlock()
			return
		}
		switch {
		case cv.status == "closed":
			c.mu.Unlock()
			s.convError(w, r, http.StatusConflict, "conversation_closed", "the conversation is closed", nil) // CO-7.12-03
			return
		case cv.direct != "":
			d := cv.direct
			c.mu.Unlock()
			s.convError(w, r, http.StatusConflict, "direct_conversation_open", "a Direct Conversation is open", map[string]any{"conversation_id": d}) // CO-7.10-07
			return
		}
	}
	// Record the message (CO-7.4-05: context merges).
	for k, v := range in.Context {
		cv.context[k] = v
	}
	cv.messages = append(cv.messages, in)
	var msg map[string]any
	json.Unmarshal(body.Message, &msg)
	msg["role"] = "user"
	s.appendLocked(cv, map[string]any{"type": "message", "message": msg})
	if cv.status != "working" && cv.status != "queued" {
		s.setStateLocked(cv, "working", cv.responder)
	}
	base := map[string]any{"conversation_id": cv.id}
	sent := &sentMsg{content: content, conv: cv.id, status: status}
	c.msgs[key] = sent
	turn := &Turn{s: s, c: cv, sessionID: a.tok.sessionID, ConversationID: cv.id, Message: in, SignedIn: a.signedIn, Scopes: slices.Clone(a.scopes), Account: a.account}
	delay := s.opts.Conversations.ReplyDelay
	background := delay > 0 && !c.closed
	if background {
		c.wg.Add(1)
	}
	lose := c.roll(c.faults.LosePOST)
	if c.loseNext > 0 {
		c.loseNext--
		lose = true
	}
	c.mu.Unlock()
	if background {
		go func() {
			defer c.wg.Done()
			time.Sleep(delay)
			s.runTurn(turn)
		}()
	} else {
		s.runTurn(turn)
	}
	c.mu.Lock()
	base["status"], base["responder"] = cv.status, cv.responder
	sent.body, _ = json.Marshal(base)
	c.mu.Unlock()
	x.sessionID = a.tok.sessionID
	if lose {
		s.loseResponse(w, r)
		return
	}
	if rp.hasWait || rp.hasCursor {
		s.convReplyRead(w, r, a, cv, status, rp) // CO-7.3-05
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(sent.body)
}

// loseResponse closes the connection without answering: the Company has
// acted, the client never hears (ConversationFaults.LosePOST).
func (s *Server) loseResponse(w http.ResponseWriter, r *http.Request) {
	exchangeOf(r).errorCode = "response_lost"
	panic(http.ErrAbortHandler)
}

// runTurn runs the Company Agent for one message and sets the status
// idle afterwards, unless the turn queued, closed or handed off.
func (s *Server) runTurn(t *Turn) {
	c := s.cs()
	c.mu.Lock()
	human := t.c.responder == "human"
	st := t.c.status
	c.mu.Unlock()
	if st == "closed" {
		return
	}
	switch {
	case s.opts.Conversations.Agent != nil:
		s.opts.Conversations.Agent(t)
	case human:
		t.Say("Thanks, I'm looking at it now.")
	default:
		r := Reply{Text: "Thanks, I have noted that."}
		if s.opts.Conversations.TextDeltas {
			r.Deltas = []string{"Thanks, ", "I have ", "noted that."}
		}
		t.Reply(r)
	}
	c.mu.Lock()
	if t.c.status == "working" {
		s.setStateLocked(t.c, "idle", t.c.responder)
	}
	if s.opts.Conversations.Noise {
		s.appendLocked(t.c, map[string]any{"type": "poll", "question": "How did we do?"})
	}
	c.mu.Unlock()
}

// appendLocked appends event ev (without id and created_at) to cv and
// wakes its readers. Called with c.mu held.
func (s *Server) appendLocked(cv *fconv, ev map[string]any) string {
	id := s.newConvID("evt_")
	out := map[string]any{"id": id, "created_at": s.clock.Now().UTC().Format(time.RFC3339Nano)}
	for k, v := range ev {
		out[k] = v
	}
	raw, err := json.Marshal(out)
	if err != nil {
		panic(fmt.Sprintf("poppytest: event does not encode: %v", err))
	}
	typ, _ := ev["type"].(string)
	cv.index[id] = cv.first + len(cv.entries)
	cv.entries = append(cv.entries, centry{id: id, typ: typ, raw: raw})
	if n := s.opts.Conversations.Retention; n > 0 {
		s.retainLocked(cv, n)
	}
	close(cv.changed)
	cv.changed = make(chan struct{})
	return id
}

// appendDeltaLocked appends a text-delta piece (CO-7.6-05).
func (s *Server) appendDeltaLocked(cv *fconv, msgID, text string) {
	raw, _ := json.Marshal(map[string]any{"message_id": msgID, "text": text})
	cv.entries = append(cv.entries, centry{typ: "text-delta", raw: raw, delta: true})
	close(cv.changed)
	cv.changed = make(chan struct{})
}

// retainLocked keeps the latest n events of cv.
func (s *Server) retainLocked(cv *fconv, n int) {
	events := 0
	for i := len(cv.entries) - 1; i >= 0; i-- {
		if cv.entries[i].delta {
			continue
		}
		events++
		if events > n {
			s.dropLocked(cv, i+1)
			return
		}
	}
}

// dropLocked drops cv's first k entries.
func (s *Server) dropLocked(cv *fconv, k int) {
	for _, e := range cv.entries[:k] {
		if e.id != "" {
			cv.purged[e.id] = true
			delete(cv.index, e.id)
		}
	}
	cv.entries = slices.Clone(cv.entries[k:])
	cv.first += k
}

func (s *Server) setStateLocked(cv *fconv, status, responder string) {
	if cv.status == status && cv.responder == responder {
		return
	}
	cv.status, cv.responder = status, responder
	s.appendLocked(cv, map[string]any{"type": "state", "status": status, "responder": responder}) // CO-7.7-02
}

// convAppendMessage appends a Company message with its pieces.
func (s *Server) convAppendMessage(cv *fconv, r Reply) {
	if r.Text == "" && r.Data == nil {
		s.reportConfig("poppytest: Reply needs text or data (CO-7.4-02)")
		return
	}
	if markup.In(r.Text) {
		s.reportConfig("poppytest: Reply text holds markup (CO-7.4-03); put structure in Data")
		return
	}
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	msgID := s.newConvID("msg_")
	sender := r.Sender
	if sender == "" {
		sender = cv.responder
	}
	for _, p := range r.Deltas {
		s.appendDeltaLocked(cv, msgID, p)
	}
	msg := map[string]any{"id": msgID, "role": "company", "sender": sender}
	if r.Text != "" {
		msg["text"] = r.Text
	}
	if r.Data != nil {
		msg["data"] = r.Data
	}
	if len(r.Operation) > 0 {
		msg["operation"] = r.Operation
	}
	for k, v := range r.Fields {
		msg[k] = v
	}
	if s.opts.Conversations.Noise {
		msg["context"] = map[string]any{"locale": "en-US"}
		msg["x_new"] = true
	}
	s.appendLocked(cv, map[string]any{"type": "message", "message": msg})
}

func (s *Server) reportConfig(msg string) { s.misuse(false, "%s", msg) }

// convAuthorization appends an authorization event and a message asking
// for it (CO-7.11-01, CO-7.11-02).
func (s *Server) convAuthorization(cv *fconv, signedIn bool, need []string) {
	c := s.cs()
	c.mu.Lock()
	ev := map[string]any{"type": "authorization", "error": "sign_in_required"}
	text := "Please sign in to your account so I can look at that."
	if signedIn {
		ev["error"] = "insufficient_scope"
		ev["scope"] = strings.Join(need, " ")
		text = "I need more access to your account to do that."
	}
	s.appendLocked(cv, ev)
	c.mu.Unlock()
	s.convAppendMessage(cv, Reply{Text: text})
}

func (s *Server) conv(id string) *fconv {
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	cv := c.convs[id]
	if cv == nil {
		s.reportConfig(fmt.Sprintf("poppytest: no conversation %q", id))
	}
	return cv
}

// Say appends a Company message to conversation id, from its current
// responder.
func (k *Conversations) Say(id string, r Reply) {
	s := k.s
	if cv := s.conv(id); cv != nil {
		s.convAppendMessage(cv, r)
	}
}

// SetState changes a conversation's status and responder, adding a state
// event (CO-7.7-02).
func (k *Conversations) SetState(id, status, responder string) {
	s := k.s
	if cv := s.conv(id); cv != nil {
		c := s.cs()
		c.mu.Lock()
		s.setStateLocked(cv, status, responder)
		c.mu.Unlock()
	}
}

// Append appends an event of any type (its "id" and "created_at" are
// filled in), such as an unknown type (PA-7.5-04). It returns the event ID.
func (k *Conversations) Append(id string, ev map[string]any) string {
	s := k.s
	cv := s.conv(id)
	if cv == nil {
		return ""
	}
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.appendLocked(cv, ev)
}

// RequestUser adds a user_requested event with reason (CO-7.10-05).
func (k *Conversations) RequestUser(id, reason string) {
	s := k.s
	s.Conversations().Append(id, map[string]any{"type": "user_requested", "reason": reason})
}

// RequireAuthorization adds an authorization event and a message: sign-in
// with no scopes, else insufficient_scope naming them (CO-7.11-01).
func (k *Conversations) RequireAuthorization(id string, scopes ...string) {
	s := k.s
	if cv := s.conv(id); cv != nil {
		s.convAuthorization(cv, len(scopes) > 0, scopes)
	}
}

// JoinHuman has a person at the Company join: responder human, status
// idle (PA-7.9-03).
func (k *Conversations) JoinHuman(id string) {
	s := k.s
	if cv := s.conv(id); cv != nil {
		c := s.cs()
		c.mu.Lock()
		if cv.status != "closed" {
			cv.handoffPending = false
			s.setStateLocked(cv, "idle", "human")
		}
		c.mu.Unlock()
	}
}

// NoHumanAvailable ends a pending handoff without a person: status idle,
// responder agent, and a Company Agent message saying why (CO-7.9-04).
func (k *Conversations) NoHumanAvailable(id string) {
	s := k.s
	cv := s.conv(id)
	if cv == nil {
		return
	}
	c := s.cs()
	c.mu.Lock()
	if cv.status == "closed" {
		c.mu.Unlock()
		return
	}
	cv.handoffPending = false
	s.setStateLocked(cv, "idle", "agent")
	c.mu.Unlock()
	s.convAppendMessage(cv, Reply{Text: "Nobody from our team is available right now. I can keep helping.", Sender: "agent"})
}

// Close closes a conversation on the Company's side, as after
// inactivity (PA-7.12-02), and its open Direct Conversation (CO-7.10-09).
func (k *Conversations) Close(id string) {
	s := k.s
	if cv := s.conv(id); cv != nil {
		c := s.cs()
		c.mu.Lock()
		s.closeLocked(cv)
		c.mu.Unlock()
	}
}

func (s *Server) closeLocked(cv *fconv) {
	if cv.status == "closed" {
		return
	}
	cv.handoffPending = false // CO-7.9-03
	if cv.direct != "" {
		if d := s.cstate.convs[cv.direct]; d != nil {
			s.closeLocked(d)
		}
	}
	s.setStateLocked(cv, "closed", cv.responder) // CO-7.12-01, CO-7.7-04
	if cv.parent != "" {
		if p := s.cstate.convs[cv.parent]; p != nil && p.direct == cv.id {
			p.direct = ""
			s.appendLocked(p, map[string]any{"type": "direct_closed", "conversation_id": cv.id}) // CO-7.10-08
		}
	}
}

// PurgeBefore drops the events of conversation id before the event
// before (CO-7.5-08).
func (k *Conversations) PurgeBefore(id, before string) {
	s := k.s
	cv := s.conv(id)
	if cv == nil {
		return
	}
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := cv.index[before]; ok {
		s.dropLocked(cv, i-cv.first)
	}
}

// ConversationInfo describes a conversation the fake holds.
type ConversationInfo struct {
	ID, Parent, OpenDirect string
	ClientID, UserID       string
	Account                string // the account it belongs to, "" if none yet
	Status, Responder      string
	// Messages are the Personal Agent's messages, in the order received,
	// each once (retries are not added again).
	Messages []IncomingMessage
	// Context is the merged context (CO-7.4-05).
	Context map[string]any
	// Events are the events kept, as JSON.
	Events []json.RawMessage
	// Actions are what the Company Agent did (Turn.Do), in order.
	Actions []string
}

// Get returns what the fake holds for conversation id.
func (k *Conversations) Get(id string) (ConversationInfo, bool) {
	s := k.s
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	cv := c.convs[id]
	if cv == nil {
		return ConversationInfo{}, false
	}
	return s.convInfoLocked(cv), true
}

// All returns every conversation, in no particular order.
func (k *Conversations) All() []ConversationInfo {
	s := k.s
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ConversationInfo, 0, len(c.convs))
	for _, cv := range c.convs {
		out = append(out, s.convInfoLocked(cv))
	}
	return out
}

func (s *Server) convInfoLocked(cv *fconv) ConversationInfo {
	ci := ConversationInfo{ID: cv.id, Parent: cv.parent, OpenDirect: cv.direct, ClientID: cv.clientID, UserID: cv.sub,
		Account: cv.account, Status: cv.status, Responder: cv.responder, Messages: slices.Clone(cv.messages), Actions: slices.Clone(cv.actions), Context: map[string]any{}}
	for k, v := range cv.context {
		ci.Context[k] = v
	}
	for _, e := range cv.entries {
		if !e.delta {
			ci.Events = append(ci.Events, bytes.Clone(e.raw))
		}
	}
	return ci
}

// convHandoff queues a handoff (spec 7.9).
func (s *Server) convHandoff(cv *fconv) {
	c := s.cs()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cv.status == "closed" || cv.responder == "human" {
		return
	}
	cv.handoffPending = true
	s.setStateLocked(cv, "queued", "agent") // CO-7.7-03
}

// convHandoffReq answers POST {id}/handoff (CO-7.9-01, A-29: a handoff
// while queued or with a person is answered 202 with the state as it is).
func (s *Server) convHandoffReq(w http.ResponseWriter, r *http.Request, a *auth, id string) {
	x := exchangeOf(r)
	if !emptyObject(x.body) {
		s.violate(x.idx, "PA-7.9-01", "handoff body is not an empty JSON object")
	}
	c := s.cs()
	c.mu.Lock()
	cv := s.owned(w, r, a, id)
	if cv == nil {
		c.mu.Unlock()
		return
	}
	switch {
	case cv.status == "closed":
		c.mu.Unlock()
		s.convError(w, r, http.StatusConflict, "conversation_closed", "the conversation is closed", nil)
		return
	case cv.direct != "":
		d := cv.direct
		c.mu.Unlock()
		s.convError(w, r, http.StatusConflict, "direct_conversation_open", "a Direct Conversation is open", map[string]any{"conversation_id": d})
		return
	}
	c.mu.Unlock()
	s.convHandoff(cv)
	c.mu.Lock()
	body := map[string]any{"conversation_id": cv.id, "status": cv.status, "responder": cv.responder}
	c.mu.Unlock()
	x.sessionID = a.tok.sessionID
	s.writeJSON(w, r, http.StatusAccepted, body)
}

// convCloseReq answers POST {id}/close (CO-7.12-01, CO-7.12-02; A-29:
// closing a closed conversation answers 200 as it is).
func (s *Server) convCloseReq(w http.ResponseWriter, r *http.Request, a *auth, id string) {
	x := exchangeOf(r)
	if !emptyObject(x.body) {
		s.violate(x.idx, "PA-7.12-01", "close body is not an empty JSON object")
	}
	c := s.cs()
	c.mu.Lock()
	cv := s.owned(w, r, a, id)
	if cv == nil {
		c.mu.Unlock()
		return
	}
	s.closeLocked(cv)
	body := map[string]any{"conversation_id": cv.id, "status": cv.status, "responder": cv.responder}
	c.mu.Unlock()
	x.sessionID = a.tok.sessionID
	s.writeJSON(w, r, http.StatusOK, body)
}

func emptyObject(b []byte) bool {
	var m map[string]any
	return json.Unmarshal(b, &m) == nil && m != nil && len(m) == 0
}
