package operations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/poppyproto/poppy/operations"
)

// A script asks the User on its terminal with TerminalApprover: only a
// typed "yes" approves, only a typed "no" declines, and the end of input is
// no answer (ErrNoAnswer), which leaves the operation proposed. A script
// gives it to its Client:
//
//	ops, err := operations.New(sess, &operations.Options{
//		Approver: operations.TerminalApprover(os.Stdout, os.Stdin),
//	})
//
// and ops.Handle asks before it confirms. Here the User's typing is a
// string, not echoed: first "sure", which is neither, then "yes".
func ExampleTerminalApprover() {
	approver := operations.TerminalApprover(os.Stdout, strings.NewReader("sure\nyes\n"))
	d, err := approver.Approve(context.Background(), &operations.ApprovalRequest{
		Company:     "Example Company",
		Domain:      "example.com",
		OperationID: "exc_5Rt2",
		Revision:    1,
		Summary:     "Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more.",
		Terms:       json.RawMessage(`{"order_id":"ord_7Hk2","price_difference":{"amount":"70.00","currency":"USD"}}`),
	})
	fmt.Println("→ approved:", d == operations.Approve, err)
	// Output:
	// Example Company (example.com) asks you to approve:
	//   Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more.
	//   terms:
	//     {
	//       "order_id": "ord_7Hk2",
	//       "price_difference": {
	//         "amount": "70.00",
	//         "currency": "USD"
	//       }
	//     }
	//   operation exc_5Rt2, revision 1
	// Type "yes" to approve or "no" to decline:   Please answer "yes" or "no".
	// Type "yes" to approve or "no" to decline: → approved: true <nil>
}
