package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/operations"
)

// The approval prompt shows terms that can be read more than one way as
// the Company sent them, every member, with a warning.
func TestApprovePromptMarksAmbiguousTerms(t *testing.T) {
	op, err := operations.Parse([]byte(`{"operation_id":"x","revision":1,"state":"proposed","summary":"Pay 1.00 USD",
		"terms":{"total":{"amount":"9999.00","currency":"USD"},"total.amount":"1.00"},"confirmation":null,"result":null}`))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	// The prompt is the SDK's terminal approver's (the one ops confirm and
	// ask use); Show is what it shows before asking.
	if err := operations.TerminalApprover(&out, nil).Show(&operations.ApprovalRequest{Company: "Example", Domain: "example.test",
		OperationID: op.ID, Revision: 1, Summary: op.Summary, Terms: op.Terms, Ambiguity: op.Ambiguity()}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{`"9999.00"`, `"total.amount": "1.00"`, "Warning:", "more than one way"} {
		if !strings.Contains(s, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, s)
		}
	}
}
