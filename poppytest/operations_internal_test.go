package poppytest

import (
	"encoding/json"
	"errors"
	"testing"
)

// CO-OPS3-10: the state machine refuses any transition out of a final
// state.
func TestOperationFinalStatePanics(t *testing.T) {
	for _, final := range []string{"succeeded", "failed", "cancelled", "expired"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s → in_progress did not panic", final)
				}
			}()
			setStateLocked(&fakeOp{id: "op_1", state: final}, "in_progress")
		}()
	}
}

// proposeOperation, the hook of the fake's other channels: CO-OPS2-03,
// CO-OPS3-15, CO-OPS4-01.
func TestProposeOperation(t *testing.T) {
	s := NewServer(t, nil)
	const client = "https://agent.test/agent.json"
	s.clientMu.Lock()
	s.clients[client] = &clientInfo{id: client, metadata: map[string]any{"extensions": map[string]any{"operations": map[string]any{"version": "1"}}}}
	s.clients["https://old.test/agent.json"] = &clientInfo{id: "https://old.test/agent.json", metadata: map[string]any{}}
	s.clientMu.Unlock()
	s.mu.Lock()
	for _, ss := range []*session{
		{id: "ses_out", clientID: client, sub: "usr_1"},
		{id: "ses_b", clientID: client, sub: "usr_1", signedIn: true, account: "acct_1", scopes: []string{"poppy:read", "poppy:write"}},
		{id: "ses_c", clientID: client, sub: "usr_1", signedIn: true, account: "acct_1", scopes: []string{"poppy:read", "poppy:write"}},
		{id: "ses_old", clientID: "https://old.test/agent.json", sub: "usr_1"},
	} {
		s.sessions[ss.id] = ss
	}
	s.mu.Unlock()
	authOf := func(sid string, signedIn bool) *auth {
		return &auth{tok: &token{sessionID: sid, clientID: client, sub: "usr_1"}, signedIn: signedIn, account: map[bool]string{true: "acct_1"}[signedIn]}
	}
	p := operationProposal{Key: "size-swap", Summary: "Swap size M for L on order ord_7Hk2.", Terms: map[string]any{"order_id": "ord_7Hk2", "size": "L"}}
	raw, err := s.proposeOperation("ses_out", p)
	if err != nil {
		t.Fatal(err)
	}
	var op struct {
		ID    string `json:"operation_id"`
		State string `json:"state"`
	}
	json.Unmarshal(raw, &op)
	if op.State != "proposed" {
		t.Fatalf("%s", raw)
	}
	fo := s.ops.ops[op.ID]
	// CO-OPS3-15: a signed-out proposal is its Session's alone, even after
	// that Session signs in.
	if !s.mayUse(fo, authOf("ses_out", false)) || s.mayUse(fo, authOf("ses_b", true)) {
		t.Error("signed-out proposal ownership")
	}
	s.mu.Lock()
	s.sessions["ses_out"].signedIn, s.sessions["ses_out"].account = true, "acct_1"
	s.mu.Unlock()
	if s.mayUse(fo, authOf("ses_b", true)) {
		t.Error("A-39: a later sign-in shared the signed-out proposal")
	}
	// CO-OPS3-14, CO-OPS4-01: a signed-in proposal belongs to the account,
	// and the same action from another Session returns it.
	raw1, _ := s.proposeOperation("ses_b", p)
	raw2, _ := s.proposeOperation("ses_c", p)
	var o1, o2 struct {
		ID string `json:"operation_id"`
	}
	json.Unmarshal(raw1, &o1)
	json.Unmarshal(raw2, &o2)
	if o1.ID == "" || o1.ID != o2.ID || o1.ID == op.ID {
		t.Errorf("CO-OPS4-01: %s %s %s", o1.ID, o2.ID, op.ID)
	}
	if !s.mayUse(s.ops.ops[o1.ID], authOf("ses_c", true)) {
		t.Error("same account can't use it")
	}
	// CO-OPS2-03
	if _, err := s.proposeOperation("ses_old", p); !errors.Is(err, errNoOperations) {
		t.Errorf("agent without the extension: %v", err)
	}
	if _, err := s.proposeOperation("ses_none", p); err == nil {
		t.Error("unknown Session")
	}
}
