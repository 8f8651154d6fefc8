package poppytest

// Reading conversation events (spec 7.5) and streaming them (spec 7.6).
//
// A read starts after its cursor: the Last-Event-ID header of a stream
// reconnect when present (it wins over a cursor query, A-27), else the
// cursor query (not for a stream with StreamIgnoresCursor), else the
// beginning. A JSON read returns at most PageSize events and has_more; an
// empty read holds for min(wait, MaxWait) and returns "cursor": the
// request's cursor, or null without one. A stream sends every entry
// from its start, text-delta pieces included, then waits for more; it
// ends after a closed conversation's last event, when the token it was
// opened with expires by the fake's Clock, after CloseStreamAfter frames,
// or when a ConversationFaults cut falls.

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// startIndex resolves a read's cursor to an absolute entry index, or
// answers cursor_expired / invalid_cursor (CO-7.5-08, CO-7.13-03). Called
// with c.mu held.
func (s *Server) startIndex(w http.ResponseWriter, r *http.Request, cv *fconv, cursor string, replay bool) (int, bool) {
	if cursor == "" {
		return cv.first, true
	}
	i, ok := cv.index[cursor]
	if !ok {
		if cv.purged[cursor] {
			s.convError(w, r, http.StatusGone, "cursor_expired", "the events at this cursor are gone", nil)
		} else {
			s.convError(w, r, http.StatusBadRequest, "invalid_cursor", "the cursor is not one of this conversation's", nil)
		}
		return 0, false
	}
	start := i + 1
	if n := s.cstate.faults.Replay; replay && n > 0 {
		// Deliver up to n events again (PA-7.5-09).
		for k := start - 1; k >= cv.first && n > 0; k-- {
			if !cv.entries[k-cv.first].delta {
				start, n = k, n-1
			}
		}
	}
	return start, true
}

// convEvents answers GET {id}/events.
func (s *Server) convEvents(w http.ResponseWriter, r *http.Request, a *auth, id string) {
	x := exchangeOf(r)
	rp, bad := s.parseRead(r)
	if bad != "" {
		s.convError(w, r, http.StatusBadRequest, "invalid_request", bad, nil)
		return
	}
	lastID := r.Header.Get("Last-Event-ID")
	stream := s.opts.Conversations.Streaming && strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	switch {
	case lastID != "" && stream:
		rp.cursor, rp.hasCursor = lastID, true
	case stream && s.opts.Conversations.StreamIgnoresCursor:
		rp.cursor, rp.hasCursor = "", false
	}
	c := s.cs()
	c.mu.Lock()
	cv := s.owned(w, r, a, id)
	if cv == nil {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	x.sessionID = a.tok.sessionID
	if stream {
		s.convStream(w, r, a, cv, rp.cursor)
		return
	}
	s.convReplyRead(w, r, a, cv, http.StatusOK, rp)
}

// convReplyRead answers a JSON read of cv from rp with status: the events
// read itself, or the reply of a POST with wait or cursor (CO-7.3-05).
func (s *Server) convReplyRead(w http.ResponseWriter, r *http.Request, a *auth, cv *fconv, status int, rp readParams) {
	c := s.cs()
	var deadline <-chan time.Time
	if rp.wait > 0 {
		t := time.NewTimer(rp.wait)
		defer t.Stop()
		deadline = t.C
	}
	c.mu.Lock()
	start, ok := s.startIndex(w, r, cv, rp.cursor, true)
	if !ok {
		c.mu.Unlock()
		return
	}
	for {
		if start < cv.first {
			start = cv.first
		}
		var events []json.RawMessage
		last := ""
		more := false
		for i := start - cv.first; i < len(cv.entries); i++ {
			e := cv.entries[i]
			if e.delta {
				continue
			}
			if len(events) == s.convPageSize() {
				more = true // PA-7.5-07
				break
			}
			events = append(events, e.raw)
			last = e.id
		}
		if len(events) > 0 || deadline == nil {
			var cursor any
			switch {
			case last != "":
				cursor = last
			case rp.cursor != "":
				cursor = rp.cursor // CO-7.5-07
			}
			if events == nil {
				events = []json.RawMessage{}
			}
			body := map[string]any{"conversation_id": cv.id, "events": events, "cursor": cursor,
				"has_more": more, "status": cv.status, "responder": cv.responder} // CO-7.5-06
			c.mu.Unlock()
			s.writeJSON(w, r, status, body)
			return
		}
		ch := cv.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			deadline = nil // CO-7.5-03: answer the empty read now
		case <-r.Context().Done():
			return
		}
		c.mu.Lock()
	}
}

// convStream answers a read with an SSE stream (CO-7.6-01, CO-7.6-02).
func (s *Server) convStream(w http.ResponseWriter, r *http.Request, a *auth, cv *fconv, cursor string) {
	c := s.cs()
	c.mu.Lock()
	pos, ok := s.startIndex(w, r, cv, cursor, true)
	c.mu.Unlock()
	if !ok {
		return
	}
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	o := s.opts.Conversations
	c.mu.Lock()
	cutAt := c.cutNext
	c.cutNext = 0
	c.mu.Unlock()
	events, sent := 0, 0
	var buf []byte
	for {
		c.mu.Lock()
		if pos < cv.first {
			pos = cv.first
		}
		batch := cv.entries[pos-cv.first:]
		pos += len(batch)
		closed := cv.status == "closed"
		ch := cv.changed
		cut, mid := false, false
		n := 0
		for range batch {
			n++
			sent++
			if c.roll(c.faults.CutStream) || sent == cutAt {
				cut, mid = true, c.faults.CutMidEvent
				break
			}
		}
		c.mu.Unlock()
		buf = buf[:0]
		for i, e := range batch[:n] {
			f := frame(e, o.Heartbeats)
			if cut && i == n-1 {
				if mid {
					buf = append(buf, f[:len(f)/2]...)
				} else {
					buf = append(buf, f...)
				}
				w.Write(buf)
				if fl != nil {
					fl.Flush()
				}
				panic(http.ErrAbortHandler) // cut mid-stream
			}
			buf = append(buf, f...)
			if !e.delta {
				events++
			}
			if o.CloseStreamAfter > 0 && events >= o.CloseStreamAfter {
				w.Write(buf)
				return // CO-7.6-03
			}
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if closed {
			return
		}
		select {
		case <-ch:
		case <-tick.C:
			if o.Heartbeats {
				w.Write([]byte(": ping\n\n"))
				if fl != nil {
					fl.Flush()
				}
			}
		case <-r.Context().Done():
			return
		}
		if !s.clock.Now().Before(a.tok.expires) {
			return // CO-7.6-03: the token has expired
		}
	}
}

// frame renders one SSE frame: an event with its ID as the SSE id and its
// JSON as data, or a text-delta piece with no id (CO-7.6-05).
func frame(e centry, heartbeats bool) []byte {
	var b []byte
	if heartbeats {
		b = append(b, ": ping\n"...)
	}
	if e.delta {
		b = append(b, "event: text-delta\n"...)
	} else {
		b = append(b, "id: "...)
		b = append(b, e.id...)
		b = append(b, '\n')
	}
	if heartbeats && len(e.raw) > 1 {
		b = append(b, "data: "...)
		b = append(b, e.raw[:1]...)
		b = append(b, "\ndata: "...)
		b = append(b, e.raw[1:]...)
	} else {
		b = append(b, "data: "...)
		b = append(b, e.raw...)
	}
	return append(b, "\n\n"...)
}
