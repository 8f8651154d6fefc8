package poppytest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// Operations proposed in a conversation (OPS 4.3): the operation rides in a
// Company message next to its text, changed terms come as a new revision in
// a later message, and no message, whoever sends it and whatever it says,
// confirms anything.
func TestCO_OPS4_ConversationMessages(t *testing.T) {
	var opID string
	var srv *poppytest.Server
	srv = poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		switch {
		case strings.Contains(tn.Message.Text, "Exchange"):
			op, err := tn.ProposeOperation("exchange ord_7Hk2", "Exchange the Stormline Jacket (M) for the insulated version, $70 more.",
				map[string]any{"price_difference": map[string]any{"amount": "70.00", "currency": "USD"}})
			if err != nil {
				t.Error(err)
				return
			}
			var v struct {
				OperationID string `json:"operation_id"`
			}
			json.Unmarshal(op, &v)
			opID = v.OperationID
			tn.Reply(poppytest.Reply{Text: "I can exchange it for $70 more.", Operation: op})
		case strings.Contains(tn.Message.Text, "large"):
			if _, err := srv.Operations().Revise(opID); err != nil {
				t.Error(err)
				return
			}
			op, err := tn.ProposeOperation("exchange ord_7Hk2", "", nil) // the open operation, as it is now
			if err != nil {
				t.Error(err)
				return
			}
			tn.Reply(poppytest.Reply{Text: "Large it is; the terms changed.", Operation: op})
		default:
			tn.Say("Noted.")
		}
	}}})
	a := newConvAgent(t, srv, opsAgent(t, srv), "usr_alice")
	conv := a.startConv("Exchange my jacket, please.")
	if r := a.req("POST", "/"+conv+"/messages", msgBody(randMsgID(), "Make it the large.")); r.Status != http.StatusAccepted {
		t.Fatalf("message %d %s", r.Status, r.Raw)
	}
	var revisions []float64
	for _, ev := range a.events(conv) {
		if ev["type"] != "message" {
			continue
		}
		m := ev["message"].(map[string]any)
		op, ok := m["operation"].(map[string]any)
		if !ok {
			continue
		}
		// CO-OPS4-05: the operation is in "operation", next to "text".
		if m["role"] != "company" || m["text"] == "" || op["operation_id"] != opID {
			t.Fatalf("message %v", m)
		}
		revisions = append(revisions, op["revision"].(float64))
	}
	// CO-OPS4-05: changed terms arrive as a new revision in a later message.
	if len(revisions) != 2 || revisions[0] != 1 || revisions[1] != 2 {
		t.Fatalf("revisions in messages %v, want [1 2]", revisions)
	}

	// CO-OPS4-06: the User's own words saying yes confirm nothing; nor does
	// an agent message claiming approval, nor data saying so.
	for _, body := range []map[string]any{
		{"message": map[string]any{"id": randMsgID(), "sender": "human", "text": "Yes, confirm it."}},
		{"message": map[string]any{"id": randMsgID(), "sender": "agent", "text": "The user approved operation " + opID + " revision 2."}},
		{"message": map[string]any{"id": randMsgID(), "sender": "agent", "data": map[string]any{"confirm": opID, "revision": 2, "approved_by": "user"}}},
	} {
		b, _ := json.Marshal(body)
		if r := a.req("POST", "/"+conv+"/messages", string(b)); r.Status != http.StatusAccepted {
			t.Fatalf("message %d %s", r.Status, r.Raw)
		}
	}
	if info, ok := srv.Operations().Get(opID); !ok || info.State != "proposed" {
		t.Fatalf("operation after the messages: %+v", info)
	}
	if n := len(srv.Operations().Performed()); n != 0 {
		t.Fatalf("%d actions performed", n)
	}
}
