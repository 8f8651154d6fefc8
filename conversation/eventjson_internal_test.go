package conversation

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// onePass are events decodeEventJSON decodes itself: the spec's forms,
// as Companies (and the fake) write them, strings with escapes or bytes
// that are not UTF-8 among them.
var onePass = []string{
	`{"id":"evt_1","type":"message","created_at":"2026-10-08T19:03:00Z","message":{"id":"msg_1","role":"company","sender":"agent","text":"Hi","data":{"a":1}}}`,
	`{"id":"evt_2","type":"state","created_at":"2026-10-08T19:03:00Z","status":"idle","responder":"human"}`,
	`{"id":"evt_3","type":"authorization","created_at":"2026-10-08T19:03:00Z","error":"insufficient_scope","scope":"poppy:read poppy:write"}`,
	`{"id":"evt_4","type":"direct_opened","created_at":"2026-10-08T19:03:00Z","conversation_id":"cnv_2"}`,
	`{"created_at":"2026-12-08T01:15:19.123456789Z","id":"evt_5","reason":"17","type":"user_requested"}`,
	` { "id" : "evt_6" , "type" : "poll" , "question" : {"q": [1, -2.5e+3, 0.5E-2, true, false, null, "x\"y", {}]} } `,
	`{"id":"evt_7","type":"message","message":{"id":"msg_2","role":"user","sender":"human","text":"two\nlines \u00e9 \ud83d\ude00","data":null,"operation":{"id":"op_1"}}}`,
	`{"id":"evt_8","type":"message","message":null}`,
	`{"id":"evt_9","type":"x","status":null}`,
	`{"id":"caf\u00e9","type":"x","reason":"\ud800"}`,
	"{\"id\":\"evt_10\",\"type\":\"x\",\"reason\":\"\xff\xfe\"}",
	`{"id":"evt_11","type":"x","status":"idle","responder":"\u212a"}`,
	`{"id":"e","type":"message","message":{"id":"m","data":"x","operation":[]}}`,
	`{"id":"évènement","type":"x"}`,
	`{}`,
}

// leftToJSON are events decodeEventJSON leaves to json.Unmarshal: keys it
// would take in another case or escaped, a key twice, values of another
// type, invalid JSON, deep nesting.
var leftToJSON = []string{
	`{"ID":"evt_1","type":"x"}`,
	`{"id":"evt_2","TYPE":"x","type":"y"}`,
	`{"id":"evt_3","type":"x","id":"evt_4"}`,
	`{"id":1,"type":"x"}`,
	`{"id":"evt_5","type":"x","message":{"id":"m","id":"n"}}`,
	`{"id":"evt_6","type":"x","message":{"ID":"m"}}`,
	`{"id":"evt_7","type":"x","message":"m"}`,
	`{"\u0069d":"evt_8","type":"x"}`,
	`{"id":"evt_9","type":"x"} x`,
	`{"id":"evt_10","type":"x",}`,
	`{"id":"evt_11","type":"x","n":01}`,
	`{"id":"evt_12","type":"x","n":` + strings.Repeat("[", maxFastDepth) + strings.Repeat("]", maxFastDepth) + `}`,
	"{\"id\":\"evt_13\",\"type\":\"x\",\"reason\":\"a\tb\"}",
	`{"id":"evt_14","type":"x","ſtatus":"idle"}`,
	`{"id":"evt_15","type":"x","reason":"\x"}`,
	`{"id":"evt_16","type":"x","n":1.}`,
	`{"id":"evt_17","type":"x","n":tru}`,
	`null`, `[]`, `"x"`, ``, `{"id":"e"`,
}

var eventSeeds = append(append([]string{}, onePass...), leftToJSON...)

// FuzzDecodeEventJSON: whatever decodeEventJSON decides is what
// json.Unmarshal decides: the same value, and nothing json.Unmarshal
// refuses.
func FuzzDecodeEventJSON(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast wireEvent
		if !decodeEventJSON(raw, &fast) {
			return
		}
		var slow wireEvent
		if err := json.Unmarshal(raw, &slow); err != nil {
			t.Fatalf("decoded what json.Unmarshal refuses (%v): %q", err, raw)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\n fast %+v %+v\n json %+v %+v", raw, fast, fast.Message, slow, slow.Message)
		}
	})
}

// FuzzDecodePageJSON: the same for a JSON events read.
func FuzzDecodePageJSON(f *testing.F) {
	for _, s := range []string{
		`{"conversation_id":"cnv_1","events":[` + eventSeeds[0] + `,` + eventSeeds[1] + `],"cursor":"evt_2","has_more":false,"status":"idle","responder":"agent"}`,
		`{"conversation_id":"cnv_1","events":[],"cursor":null,"has_more":true,"status":"working","responder":"agent","x":{"y":[]}}`,
		`{"events":null,"has_more":null}`, `{"events":[null, 1, "a", [], {}]}`, `{"events":[1,]}`,
		`{"events":[],"events":[]}`, `{"Events":[]}`, `{"cursor":1}`, `{"has_more":"true"}`, `{"cursor":"a","cursor":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast page
		if !decodePageJSON(raw, &fast) {
			return
		}
		var slow page
		if err := json.Unmarshal(raw, &slow); err != nil {
			t.Fatalf("decoded what json.Unmarshal refuses (%v): %q", err, raw)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\n fast %+v\n json %+v", raw, fast, slow)
		}
	})
}

// FuzzDecodeDeltaJSON: the same for a text-delta's data.
func FuzzDecodeDeltaJSON(f *testing.F) {
	for _, s := range []string{
		`{"message_id":"msg_1","text":"I can do that. "}`, `{"message_id":"msg 1","text":"\u001b[2J"}`,
		`{"message_id":"m","Text":"a"}`, `{"message_id":"m","text":1}`, `{"message_id":"m","text":null,"x":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var id, text string
		if !decodeDeltaJSON(raw, &id, &text) {
			return
		}
		var d struct {
			MessageID string `json:"message_id"`
			Text      string `json:"text"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("decoded what json.Unmarshal refuses (%v): %q", err, raw)
		}
		if id != d.MessageID || text != d.Text {
			t.Fatalf("%q: fast %q %q, json %q %q", raw, id, text, d.MessageID, d.Text)
		}
	})
}

// TestDecodeEventJSONTakesCompanyForms: the events of the spec's forms,
// as Companies write them, are decoded in one pass (the reader's speed
// depends on it); the others are left to json.Unmarshal.
func TestDecodeEventJSONTakesCompanyForms(t *testing.T) {
	for _, s := range onePass {
		var w wireEvent
		if !decodeEventJSON([]byte(s), &w) {
			t.Errorf("left to json.Unmarshal: %s", s)
		}
	}
	for _, s := range leftToJSON {
		var w wireEvent
		if decodeEventJSON([]byte(s), &w) {
			t.Errorf("decoded in one pass: %s", s)
		}
	}
	var p page
	if !decodePageJSON([]byte(`{"conversation_id":"cnv_1","events":[`+strings.Join(onePass[:5], ",")+`],"cursor":"evt_5","has_more":false,"status":"idle","responder":"agent"}`), &p) || len(p.Events) != 5 {
		t.Errorf("a page left to json.Unmarshal: %+v", p)
	}
}

// TestValidIDIsTheSpecRule: validID, a loop, says what spec 7.2's rule
// says (1 to 256 characters of A-Z a-z 0-9 - _) for every byte, at and
// past the length bounds: a Company ID that breaks it is refused
// (PA-7.2-05).
func TestValidIDIsTheSpecRule(t *testing.T) {
	rule := regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)
	ids := []string{"", "a", strings.Repeat("a", 256), strings.Repeat("a", 257), "evt_1-Z", "évt", "a\n", "\na"}
	for c := range 256 {
		ids = append(ids, "id"+string(rune(c)), string([]byte{byte(c)}))
	}
	for _, id := range ids {
		// PA-7.2-05
		if got, want := validID(id), rule.MatchString(id); got != want {
			t.Errorf("validID(%q) = %v, the rule says %v", id, got, want)
		}
	}
}
