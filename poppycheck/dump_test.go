package poppycheck_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

func TestDump(t *testing.T) {
	if os.Getenv("DUMP") == "" {
		t.Skip()
	}
	srv := poppytest.NewServer(t, &poppytest.Options{Conversation: poppytest.ConversationOptions{Streaming: true, TextDeltas: true}})
	rep := runAgainst(t, srv, nil)
	for _, r := range rep.Results {
		if r.Status != "not observed" || os.Getenv("DUMP") == "all" {
			b, _ := json.Marshal(r)
			t.Logf("%s", b)
		} else {
			t.Logf("%s NOT %s", r.Rule, r.Reason)
		}
	}
	t.Logf("notes %v aborted %q requests %d", rep.Notes, rep.Aborted, rep.Requests)
}
