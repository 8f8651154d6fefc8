package operations_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/poppyproto/poppy/operations"
)

// FuzzParse feeds arbitrary operations to the parser and the permission
// matcher: they fail cleanly, never panic, and what parses round-trips.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"operation_id":"exc_5Rt2","revision":1,"state":"proposed","summary":"s","terms":` + jacketTerms + `,"expires_at":"2026-10-08T12:20:00-07:00","user_approval_required":false,"url":"https://example.com/x","confirmation":null,"result":null}`,
		`{"operation_id":"x","revision":2,"state":"succeeded","summary":"s","confirmation":{"revision":2,"approved_by":"user","confirmed_at":"2026-10-08T12:04:31-07:00"},"result":{"summary":"done","data":{"a":1}}}`,
		`{"operation_id":"x","revision":1e3,"state":"proposed","summary":""}`,
		`{"operation_id":"x","revision":1,"state":"proposed","summary":"s","terms":{"a":{"b":{"c":[1,2]}},"":{}}}`,
		`null`, `{}`, `[`, `{"operation_id":1}`,
	} {
		f.Add([]byte(seed))
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := operations.Parse(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(op)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := operations.Parse(out)
		if err != nil || back.ID != op.ID || back.Revision != op.Revision || back.Summary != op.Summary {
			t.Fatalf("round trip: %v %+v", err, back)
		}
		p := fullPermission(now)
		sub := subject(now, "")
		sub.Operation = op
		_ = p.Check(sub)
	})
}
