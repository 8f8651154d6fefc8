package conversation

import (
	"testing"
)

// FuzzParseEvent: a Company's event never panics the parser, and what it
// accepts follows spec 7.2's ID rules.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"id":"evt_1","type":"message","created_at":"2026-10-08T19:03:00Z","message":{"id":"msg_1","role":"company","sender":"agent","text":"Hi","data":{"a":1}}}`,
		`{"id":"evt_2","type":"state","created_at":"2026-10-08T19:03:00Z","status":"idle","responder":"human"}`,
		`{"id":"evt_3","type":"authorization","created_at":"2026-10-08T19:03:00Z","error":"insufficient_scope","scope":"poppy:read poppy:write"}`,
		`{"id":"evt_4","type":"direct_opened","created_at":"2026-10-08T19:03:00Z","conversation_id":"cnv_2"}`,
		`{"id":"evt/5","type":"x"}`, `[]`, `{"id":"e","type":"message","message":null}`,
	} {
		f.Add([]byte(s))
	}
	c := &Conversation{endpoint: "https://api.example.test/poppy/conversations", id: "cnv_1", ops: true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := c.parseEvent(raw)
		if err != nil {
			return
		}
		if !validID(ev.ID) || ev.Type == "" {
			t.Fatalf("accepted %+v", ev)
		}
		if ev.Type == EventMessage && (ev.Message == nil || !validID(ev.Message.ID)) {
			t.Fatalf("accepted message %+v", ev.Message)
		}
	})
}

// FuzzParseDelta: a text-delta never panics the parser.
func FuzzParseDelta(f *testing.F) {
	f.Add(`{"message_id":"msg_1","text":"I can do that. "}`)
	f.Add(`{"message_id":"msg 1","text":"\u001b[2J"}`)
	f.Fuzz(func(t *testing.T, data string) {
		d, err := parseDelta([]byte(data))
		if err == nil && (!validID(d.MessageID) || cleanText(d.Text) != d.Text) {
			t.Fatalf("accepted %+v", d)
		}
	})
}
