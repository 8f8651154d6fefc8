package llmtools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// strs returns every string in a decoded JSON value.
func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, strs(x)...)
		}
		return out
	case map[string]any:
		var out []string
		for k, x := range v {
			out = append(out, k)
			out = append(out, strs(x)...)
		}
		return out
	}
	return nil
}

// TestCompanyTextToTheModel: a Company message holding escapes, bidi
// controls and tag characters reaches the model's tool result through the
// one cleaner (internal/companytext): no string of the result holds them.
func TestCompanyTextToTheModel(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	r := e.Call(t, "poppy_start_conversation", `{"domain":"example.test","text":"Hello."}`)
	id, _ := r["conversation_id"].(string)
	e.Srv.Conversations().Append(id, map[string]any{"type": "message", "message": map[string]any{"id": "msg_hostile", "role": "company", "sender": "agent", "text": companytexttest.Hostile}})
	e.Srv.Conversations().Append(id, map[string]any{"type": "state", "status": "idle", "responder": "agent"})
	out, err := e.K.Execute(ctx, "poppy_read_conversation", json.RawMessage(`{"domain":"example.test","conversation_id":"`+id+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range strs(v) {
		companytexttest.Check(t, "tool result", s)
		found = found || strings.Contains(s, "annotated")
	}
	if !found {
		t.Fatalf("the Company's message is not in the result: %s", out)
	}
}
