package poppycheck

// Step 6: a conversation (spec 7): start, resend, read, wait, stream,
// resume, close, and the errors of 7.13.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/internal/markup"
)

var (
	idRE     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)
	prefixRE = regexp.MustCompile(`^[A-Za-z]{1,8}_`)
)

const checkText = "This is poppy check, a conformance test of the Personal Agent Protocol. No reply is needed."

type event struct {
	raw map[string]any
	id  string
	typ string
}

// holdSlack is how much longer than wait the check waits for a long poll's
// answer before it calls the read held past wait (CO-7.5-03): room for the
// network and a busy Company, not for a Company that ignores wait.
const holdSlack = 5 * time.Second

// holdWait is the wait of the read on an idle conversation (CO-7.5-03).
const holdWait = 2

// conversation walks a conversation at the protocol's endpoint with
// Session s. It returns false, having checked nothing, when the start
// answered that the conversation needs a signed-in Session (the
// interactive run then walks it again, signed in).
func (p *prober) conversation(ctx context.Context, s *session, proto map[string]any) bool {
	p.step = "conversation start"
	ep, _ := proto["endpoint"].(string)
	ep = strings.TrimSuffix(ep, "/")
	token := s.token
	if res, _ := proto["resource"].(string); res != "" {
		t, ok := p.resourceToken(ctx, s, res, "CO-3-12")
		if !ok {
			return true
		}
		token = t
	}
	jsonHdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}
	msg := map[string]any{"message": map[string]any{"id": "msg_" + jose.RandomID(16), "sender": "agent", "text": checkText,
		"context": map[string]any{"user_available": false}}}
	body := jsonBody(msg)
	r, err := p.resourceRequest(ctx, s, http.MethodPost, ep, body, jsonHdr, token, proofOK)
	if err != nil {
		return true
	}
	if code, _, _ := challenge(r.header, "DPoP"); r.status == http.StatusForbidden && code == "sign_in_required" && !s.signed {
		// spec 7.11: a Company may need a signed-in Session to talk;
		// that answer is spec 6's, and the conversation rules aren't
		// seen without a sign-in.
		p.notObserved("the conversation endpoint answered a signed-out Session sign_in_required: its conversations need a sign-in (run with --interactive)",
			"CO-7.3-01", "CO-7.3-02", "CO-7.3-03", "CO-7.5-01", "CO-7.5-02", "CO-7.5-03", "CO-7.5-04", "CO-7.5-06", "CO-7.5-07",
			"CO-7.2-05", "CO-7.2-06", "CO-7.7-01", "CO-7.7-02", "CO-7.12-01", "CO-7.12-02", "CO-7.12-03", "CO-7.13-01", "CO-7.13-02", "CO-7.13-03", "CO-7.3-05",
			"CO-7.6-01", "CO-7.6-02", "CO-7.6-04", "CO-7.6-05", "CO-3-12")
		return false
	}
	var start map[string]any
	_ = json.Unmarshal(r.body, &start)
	id, _ := start["conversation_id"].(string)
	ok := r.status == http.StatusCreated && id != "" && hasStatusResponder(start)
	p.check("CO-7.3-01", ok, r.ex, "starting a conversation answered %d with conversation_id %q, status %v, responder %v", r.status, id, start["status"], start["responder"])
	if !ok {
		return true
	}
	if _, hasRes := proto["resource"]; hasRes {
		p.pass("CO-3-12", r.ex, "the conversation endpoint took a token issued for its resource")
	}
	p.check("CO-7.7-01", true, r.ex, "the start answered status %v and responder %v", start["status"], start["responder"])
	p.check("CO-7.2-05", idRE.MatchString(id), r.ex, "conversation ID %q", id)
	p.check("CO-7.2-06", prefixRE.MatchString(id), r.ex, "conversation ID %q starts with a short kind prefix", id)
	if s.token == token && !s.signed {
		p.pass("CO-4.3-17", r.ex, "the Session Token issued without resource works at the conversation endpoint too")
	}

	// The same message again, as after a lost answer.
	p.step = "conversation resend"
	if r, err := p.resourceRequest(ctx, s, http.MethodPost, ep, body, jsonHdr, token, proofOK); err == nil {
		var again map[string]any
		_ = json.Unmarshal(r.body, &again)
		id2, _ := again["conversation_id"].(string)
		p.check("CO-7.3-03", r.status == http.StatusCreated && id2 == id, r.ex, "the first message sent again answered %d with conversation %q (first %q)", r.status, id2, id)
		p.check("CO-7.3-02", r.status == http.StatusCreated && id2 == id, r.ex, "the resent message got the first answer")
	}

	p.step = "conversation read"
	base := ep + "/" + url.PathEscape(id)
	evs, cursor, ok := p.readEvents(ctx, s, base+"/events", token)
	if ok {
		count := 0
		for _, e := range evs {
			if e.typ == "message" {
				if m, _ := e.raw["message"].(map[string]any); m["id"] == msg["message"].(map[string]any)["id"] {
					count++
				}
			}
		}
		if count == 0 {
			// The Company keeps events as long as it chooses (spec 7.5):
			// a message no longer there can't be counted.
			p.notObserved("the conversation's events no longer hold the first message (the Company keeps events as long as it chooses)", "CO-7.3-02")
		} else {
			p.check("CO-7.3-02", count == 1, nil, "the message sent twice is in the conversation %d time(s)", count)
		}
		p.check("CO-7.5-02", len(evs) > 0, nil, "a read without cursor returned %d event(s) from the beginning", len(evs))
		// Read again after the cursor, waiting: nothing it returned
		// before comes back, and the Company holds the read up to wait
		// seconds at most (CO-7.5-03).
		if cursor != "" {
			p.step = "conversation read after cursor"
			p.idleRead(ctx, s, base, cursor, token, evs)
		}
	}
	p.step = "conversation stream"
	p.stream(ctx, s, base+"/events", token)

	p.step = "conversation errors"
	if r, err := p.resourceRequest(ctx, s, http.MethodGet, ep+"/cnv_"+jose.RandomID(12)+"/events", nil, http.Header{"Accept": {"application/json"}}, token, proofOK); err == nil {
		code := errorCode(r.body)
		p.check("CO-7.13-02", r.status == http.StatusNotFound && code == "conversation_not_found", r.ex, "an unknown conversation answered %d %q", r.status, code)
		p.check("CO-7.13-01", isJSONType(r.get("Content-Type")) && code != "", r.ex, "the error is JSON with an error code: %q", code)
	}
	if r, err := p.resourceRequest(ctx, s, http.MethodGet, base+"/events?cursor=evt_"+jose.RandomID(12), nil, http.Header{"Accept": {"application/json"}}, token, proofOK); err == nil {
		code := errorCode(r.body)
		p.check("CO-7.13-03", r.status == http.StatusBadRequest && code == "invalid_cursor", r.ex, "a cursor the conversation never had answered %d %q", r.status, code)
	}

	// A second message with wait: accepted (202) and answered as a read.
	p.step = "conversation message with wait"
	second := jsonBody(map[string]any{"message": map[string]any{"id": "msg_" + jose.RandomID(16), "sender": "agent", "text": "Thank you, that is all."}})
	if r, err := p.resourceRequest(ctx, s, http.MethodPost, base+"/messages?wait=1", second, jsonHdr, token, proofOK); err == nil {
		var m map[string]any
		_ = json.Unmarshal(r.body, &m)
		_, okEvents := m["events"].([]any)
		_, hasCursor := m["cursor"]
		p.check("CO-7.3-01", r.status == http.StatusAccepted && hasStatusResponder(m), r.ex, "a later message answered %d, status %v, responder %v", r.status, m["status"], m["responder"])
		p.check("CO-7.3-05", r.status == http.StatusAccepted && okEvents && hasCursor, r.ex, "a message with wait answered %d as a read: events %s, cursor %s", r.status, present(okEvents), present(hasCursor))
	}

	p.step = "conversation close"
	r, err = p.resourceRequest(ctx, s, http.MethodPost, base+"/close", []byte("{}"), jsonHdr, token, proofOK)
	if err != nil {
		return true
	}
	var closed map[string]any
	_ = json.Unmarshal(r.body, &closed)
	p.check("CO-7.12-02", r.status == http.StatusOK && closed["status"] == "closed" && hasStatusResponder(closed), r.ex,
		"closing answered %d, status %v, responder %v", r.status, closed["status"], closed["responder"])
	p.check("CO-7.7-01", hasStatusResponder(closed), r.ex, "the close answered status and responder")
	if evs, _, ok := p.readEvents(ctx, s, base+"/events", token); ok {
		found := false
		for _, e := range evs {
			found = found || e.typ == "state" && e.raw["status"] == "closed"
		}
		p.check("CO-7.12-01", found, nil, "after closing, the events hold a state event with status closed: %v", found)
		p.check("CO-7.7-02", found, nil, "the change to closed added a state event: %v", found)
		p.check("CO-7.12-03", true, nil, "the closed conversation's events stay readable")
	}
	more := jsonBody(map[string]any{"message": map[string]any{"id": "msg_" + jose.RandomID(16), "sender": "agent", "text": "One more thing."}})
	if r, err := p.resourceRequest(ctx, s, http.MethodPost, base+"/messages", more, jsonHdr, token, proofOK); err == nil {
		code := errorCode(r.body)
		p.check("CO-7.12-03", r.status == http.StatusConflict && code == "conversation_closed", r.ex, "a message to the closed conversation answered %d %q", r.status, code)
	}
	return true
}

// idleRead reads the conversation after cursor, the last event there is,
// with wait=2 (holdWait): nothing read before comes back (CO-7.5-02), the
// cursor of an empty read is the request's (CO-7.5-07), and the Company
// answers within wait, with an empty events list when nothing came
// (CO-7.5-03). It may answer sooner (CO-7.5-05: a MAY), so only a read
// held past wait (plus holdSlack) or answered without an events list
// breaks the rule.
func (p *prober) idleRead(ctx context.Context, s *session, base, cursor, token string, before []event) {
	u := base + "/events?cursor=" + url.QueryEscape(cursor) + "&wait=" + fmt.Sprint(holdWait)
	limit := holdWait*time.Second + holdSlack
	start := time.Now()
	r, err := p.resourceRequestWithin(ctx, limit, s, http.MethodGet, u, nil, http.Header{"Accept": {"application/json"}}, token, proofOK)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		if isTimeout(err) && ctx.Err() == nil {
			// CO-7.5-03
			p.fail("CO-7.5-03", r.ex, "a read with wait=%d on an idle conversation got no answer within %v: the Company held it past wait", holdWait, limit)
		}
		return
	}
	later, c2, ok := p.readPage(r)
	if !ok {
		// CO-7.5-03: a read that times out returns an empty events list
		// (CO-7.5-06 says what else was wrong).
		if r.status == http.StatusOK {
			p.fail("CO-7.5-03", r.ex, "a read with wait=%d on an idle conversation answered after %v without an events list", holdWait, took)
		}
		return
	}
	p.check("CO-7.5-03", true, r.ex, "a read with wait=%d on an idle conversation answered after %v with %d event(s)", holdWait, took, len(later))
	seen := false
	for _, e := range later {
		for _, old := range before {
			seen = seen || e.id == old.id
		}
	}
	p.check("CO-7.5-02", !seen, nil, "a read after cursor %q returned none of the events before it", cursor)
	if len(later) == 0 {
		p.check("CO-7.5-07", c2 == cursor, nil, "a read with no events answered cursor %q for the request's %q", c2, cursor)
	}
}

func hasStatusResponder(m map[string]any) bool {
	st, _ := m["status"].(string)
	rs, _ := m["responder"].(string)
	return st != "" && rs != ""
}

// maxPages bounds the pages one read follows through has_more.
const maxPages = 10

// readEvents reads the events as JSON, following has_more (spec 7.5: the
// agent reads again right away) for at most maxPages pages, and checks
// each page (readPage). It returns the events and the last cursor.
func (p *prober) readEvents(ctx context.Context, s *session, u, token string) ([]event, string, bool) {
	var all []event
	cursor := ""
	for page := 0; page < maxPages; page++ {
		next := u
		if page > 0 {
			next = u + "?cursor=" + url.QueryEscape(cursor)
			if strings.Contains(u, "?") {
				next = u + "&cursor=" + url.QueryEscape(cursor)
			}
		}
		start := time.Now()
		r, err := p.resourceRequest(ctx, s, http.MethodGet, next, nil, http.Header{"Accept": {"application/json"}}, token, proofOK)
		if err != nil {
			return nil, "", false
		}
		if !strings.Contains(next, "wait=") {
			p.check("CO-7.5-04", time.Since(start) < 5*time.Second, r.ex, "a read without wait returned after %v", time.Since(start).Round(time.Millisecond))
		}
		evs, c, ok := p.readPage(r)
		if !ok {
			return nil, "", false
		}
		all = append(all, evs...)
		cursor = c
		var m map[string]any
		_ = json.Unmarshal(r.body, &m)
		if more, _ := m["has_more"].(bool); !more || c == "" || strings.Contains(u, "cursor=") {
			break
		}
	}
	return all, cursor, true
}

// readPage checks one read's answer (CO-7.5-01, CO-7.5-06, CO-7.2-05,
// CO-7.4-02, CO-7.4-03, CO-7.4-06, CO-7.7-05) and returns its events and
// cursor.
func (p *prober) readPage(r *reply) ([]event, string, bool) {
	var page map[string]any
	_ = json.Unmarshal(r.body, &page)
	raw, okEvents := page["events"].([]any)
	_, okMore := page["has_more"].(bool)
	_, hasCursor := page["cursor"]
	ok := r.status == http.StatusOK && okEvents && okMore && hasCursor && hasStatusResponder(page)
	p.check("CO-7.5-06", ok, r.ex, "a read answered %d with events %s, cursor %s, has_more %s, status %v, responder %v",
		r.status, present(okEvents), present(hasCursor), present(okMore), page["status"], page["responder"])
	if !ok {
		return nil, "", false
	}
	p.check("CO-7.7-01", true, r.ex, "the read answered status and responder")
	cursor, _ := page["cursor"].(string)
	var out []event
	for _, e := range raw {
		m, _ := e.(map[string]any)
		out = append(out, p.checkEvent(m, r.ex))
	}
	return out, cursor, true
}

// checkEvent checks one event's shape.
func (p *prober) checkEvent(m map[string]any, ex *Exchange) event {
	id, _ := m["id"].(string)
	typ, _ := m["type"].(string)
	at, _ := m["created_at"].(string)
	_, terr := time.Parse(time.RFC3339, at)
	ok := id != "" && typ != "" && terr == nil
	var msg map[string]any
	if typ == "message" {
		msg, _ = m["message"].(map[string]any)
		role, _ := msg["role"].(string)
		ok = ok && (role == "user" || role == "company")
	}
	p.check("CO-7.5-01", ok, ex, "event %q: type %q, created_at %q, message role %v", id, typ, at, msg["role"])
	if id != "" {
		p.check("CO-7.2-05", idRE.MatchString(id), ex, "event ID %q", id)
	}
	if msg != nil && msg["role"] == "company" {
		text, _ := msg["text"].(string)
		_, hasData := msg["data"].(map[string]any)
		_, hasContext := msg["context"]
		sender, _ := msg["sender"].(string)
		p.check("CO-7.4-02", text != "" || hasData, ex, "a Company message has text or data")
		p.check("CO-7.4-06", !hasContext && msg["id"] != nil, ex, "a Company message has an id and no context")
		p.check("CO-7.7-05", sender != "", ex, "a Company message's sender %q", sender)
		p.check("CO-7.4-03", !markup.In(text), ex, "the Company Agent's text holds no JSON or markup")
	}
	return event{raw: m, id: id, typ: typ}
}

// stream reads the events as a server-sent event stream for at most 3 s
// or 20 events (CO-7.6-01, CO-7.6-02, CO-7.6-05), then resumes after the
// first with Last-Event-ID (CO-7.6-04).
func (p *prober) stream(ctx context.Context, s *session, u, token string) {
	ids, streamed, err := p.readStream(ctx, s, u, token, "")
	if err != nil {
		return
	}
	if !streamed {
		p.notObserved("the Company answered a read with Accept: text/event-stream with JSON: it doesn't stream (a MAY)",
			"CO-7.6-01", "CO-7.6-02", "CO-7.6-03", "CO-7.6-04", "CO-7.6-05")
		return
	}
	p.pass("CO-7.6-01", nil, "the Company streams events as server-sent events")
	if len(ids) < 2 {
		p.notObserved("the stream carried fewer than two events to resume between", "CO-7.6-04")
		return
	}
	p.step = "conversation resume"
	again, _, err := p.readStream(ctx, s, u, token, ids[0])
	if err != nil || len(again) == 0 {
		return
	}
	p.check("CO-7.6-04", again[0] == ids[1], nil, "a stream resumed with Last-Event-ID %q began with %q (want %q)", ids[0], again[0], ids[1])
}

func (p *prober) readStream(ctx context.Context, s *session, u, token, lastID string) (ids []string, streamed bool, err error) {
	pu, _ := url.Parse(u)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	proof, err := s.key.proof(http.MethodGet, htu(pu), token, s.nonce(pu.Host), p.clock.Now())
	if err != nil {
		return nil, false, err
	}
	p.secret(proof, token)
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "DPoP "+token)
	req.Header.Set("DPoP", proof)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, ex, done, err := p.start(ctx, req, nil, 3*time.Second)
	if err != nil {
		return nil, false, err
	}
	defer done()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, keptBody))
		ex.ResponseBody = keep(b)
		p.fail("CO-7.5-06", ex, "a read with Accept: text/event-stream answered %d", resp.StatusCode)
		return nil, false, errors.New("poppycheck: stream refused")
	}
	if !strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream") {
		return nil, false, nil
	}
	// Lines arrive on a channel so that the read can stop once the stream
	// has been quiet for a moment after its first event: a stream stays
	// open for new events, and the check needs only what is there.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(io.LimitReader(resp.Body, maxBody))
		sc.Buffer(make([]byte, 64<<10), maxBody)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	defer cancel() // ends the reader before the body closes
	var sseID, sseEvent string
	var data []string
	hasID := false
	quiet := time.NewTimer(time.Hour)
	defer quiet.Stop()
	for len(ids) < 20 {
		var line string
		var more bool
		select {
		case line, more = <-lines:
		case <-quiet.C:
		case <-ctx.Done():
		}
		if !more {
			break
		}
		if len(ids) > 0 {
			quiet.Reset(300 * time.Millisecond)
		}
		switch {
		case strings.HasPrefix(line, ":"):
		case line == "":
			if len(data) > 0 {
				p.streamEvent(ex, sseEvent, sseID, hasID, strings.Join(data, "\n"), &ids)
			}
			sseID, sseEvent, data, hasID = "", "", nil, false
		default:
			field, val, _ := strings.Cut(line, ":")
			val = strings.TrimPrefix(val, " ")
			switch field {
			case "id":
				sseID, hasID = val, true
			case "event":
				sseEvent = val
			case "data":
				data = append(data, val)
			}
		}
	}
	return ids, true, nil
}

func (p *prober) streamEvent(ex *Exchange, name, id string, hasID bool, data string, ids *[]string) {
	var m map[string]any
	if json.Unmarshal([]byte(data), &m) != nil {
		p.fail("CO-7.6-02", ex, "a streamed event's data is not JSON")
		return
	}
	if name == "text-delta" {
		_, okText := m["text"].(string)
		p.check("CO-7.6-05", !hasID && okText, ex, "a text-delta event with SSE id %s and text %s", present(hasID), present(okText))
		return
	}
	evID, _ := m["id"].(string)
	p.check("CO-7.6-02", hasID && id == evID && evID != "", ex, "a streamed event with SSE id %q and data id %q", id, evID)
	p.checkEvent(m, ex)
	*ids = append(*ids, evID)
}

// resourceToken gets a DPoP token for the Session issued for resource
// (spec 4.3, RFC 8707).
func (p *prober) resourceToken(ctx context.Context, s *session, resource, rule string) (string, bool) {
	form := url.Values{"grant_type": {grantJWTBearer}, "session_id": {s.id}, "resource": {resource}}
	r, m, err := p.tokenRequest(ctx, s, form, false)
	if err != nil || m == nil {
		if r != nil {
			p.fail(rule, r.ex, "a token for resource %s answered %d %q", resource, r.status, errorCode(r.body))
		}
		return "", false
	}
	tok, _ := m["access_token"].(string)
	return tok, tok != ""
}

var _ = fmt.Sprint
