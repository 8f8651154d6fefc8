package operations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

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
	company, err := poppytest.New(nil)
	if err != nil {
		panic(err)
	}
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
	req, _ := http.NewRequest("POST", company.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges",
		strings.NewReader(`{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`))
	req.Header.Set("Content-Type", "application/json")
	op, _, err := ops.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("proposed:", op.State)
	done, err := ops.Handle(ctx, op, nil)
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

// An operation object as a channel carries it (OPS 3): packages api and
// conversation read it out of a 202, a tool result or a message and hand
// over an *Operation; Parse is what they call.
func ExampleParse() {
	raw := json.RawMessage(`{"operation_id":"exc_5Rt2","revision":1,"state":"proposed",
		"summary":"Exchange the Stormline Jacket (M) on order ord_7Hk2 for the Stormline Insulated Jacket (M), for $70.00 more.",
		"expires_at":"2026-10-08T12:20:00-07:00","confirmation":null,"result":null}`)
	op, err := operations.Parse(raw)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(op.ID, op.Revision, op.State, op.ExpiresAt.UTC().Format(time.RFC3339))
	// Output: exc_5Rt2 1 proposed 2026-10-08T19:20:00Z
}

// A standing permission covers every term with a predicate; the matcher
// names the term it refuses.
func ExamplePermission_Check() {
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	p := operations.Permission{
		ID: "perm_size", Issuer: "https://auth.example.com", Account: "default",
		Action:  operations.OpenAPIAction("POST", "/orders/{id}/exchanges"),
		Expires: now.Add(30 * 24 * time.Hour),
		Terms: []operations.Term{
			operations.AnyValue(operations.P("order_id")),
			operations.AnyValue(operations.P("item_id")),
			operations.OneOf(operations.P("replacement_sku"), "stormline-l", "stormline-s"),
			operations.AtMost(operations.P("price_difference", "amount"), "20.00"),
			operations.Equal(operations.P("price_difference", "currency"), "USD"),
		},
		Description: "Exchange for a different size if it costs under $20",
	}
	op, _ := operations.Parse([]byte(`{"operation_id":"exc_5Rt2","revision":1,"state":"proposed","summary":"…",
		"terms":{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m",
		"price_difference":{"amount":"70.00","currency":"USD"}}}`))
	err := p.Check(operations.Subject{Issuer: "https://auth.example.com", Account: "default",
		Action: operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), Operation: op, Now: now})
	fmt.Println(err)
	// Output: operations: permission perm_size does not cover term "replacement_sku": "stormline-insulated-m" is not allowed
}
