package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// The spec's jacket exchange: proposed by the API, approved by the User
// (here an Approver that answers for the demo), confirmed, and tracked to
// its result.
func Example() {
	ctx := context.Background()
	company := poppytest.NewServer(nil, nil)
	defer company.Close()
	key, _ := poppy.GenerateSigningKey()
	identity, _ := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     "https://agent.test/agent.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"},
		Keys:         []*poppy.SigningKey{key},
		Extensions:   map[string]string{"operations": "1"}, // OPS 2
	})
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{Store: keystore.NewMemory(), HTTPClient: company.Client(), Clock: company.Clock()})
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)
	signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, signin.PrompterFuncs{
		ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
			_, err := company.Browse(ctx, p.VerificationURIComplete) // the fake's User approves
			return err
		}})

	// A real agent asks the User in its own interface.
	approver := operations.ApproverFunc(func(_ context.Context, r *operations.ApprovalRequest) (operations.Decision, error) {
		fmt.Printf("%s asks (revision %d): %s\n", r.Company, r.Revision, operations.PlainText(r.Summary, 300))
		fmt.Println("demo: approving on the User's behalf")
		return operations.Approve, nil
	})
	ops, err := operations.New(sess, &operations.Options{Approver: approver})
	if err != nil {
		fmt.Println(err)
		return
	}
	req, _ := http.NewRequest("POST", company.APIURL()+"/orders/ord_7Hk2/exchanges",
		strings.NewReader(`{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`))
	req.Header.Set("Content-Type", "application/json")
	op, _, err := ops.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("proposed:", op.State)
	done, err := ops.Handle(ctx, op)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("final:", done.State)
	fmt.Println(done.Result.Summary)
	// Output:
	// proposed: proposed
	// Example Company asks (revision 1): Exchange the Stormline Jacket (M) (item itm_4Qa) on order ord_7Hk2 for the Stormline Insulated Jacket (M) (stormline-insulated-m), for $70.00 more (USD), charged to the card used for the order.
	// demo: approving on the User's behalf
	// final: succeeded
	// Exchange placed. The Stormline Insulated Jacket (M) ships today, and a return label for the original jacket was emailed. $70.00 was charged to the card ending in 4242.
}
