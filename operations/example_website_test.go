package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// exampleSession starts a fake Company and a Session signed in to it with
// poppy:read and poppy:write, for the examples.
func exampleSession(ctx context.Context) (*poppytest.Server, *poppy.Session) {
	company, err := poppytest.New(nil)
	if err != nil {
		panic(err)
	}
	key, _ := poppy.GenerateSigningKey()
	identity, _ := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     "https://agent.test/agent.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"},
		Keys:         []*poppy.SigningKey{key},
		Extensions:   map[string]string{"operations": "1"},
	})
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{Store: keystore.NewMemory(), HTTPClient: company.Client(), Clock: company.Clock()})
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)
	signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, signin.PrompterFuncs{
		ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
			_, err := company.Browse(ctx, p.VerificationURIComplete)
			return err
		}})
	return company, sess
}

// Confirming on the Company's website instead of at the operations
// endpoint (OPS 4.4): the User approves the revision first, as for Confirm;
// then the WebsiteConfirmer presses the confirm button of the operation's
// page in a browser the agent controls, joined to the Session (here an
// HTTP client with a cookie jar; package browser/headless drives a real
// Chromium). The SDK reads the operation at the endpoint afterwards and
// tracks it to its result.
func ExampleClient_Confirm_website() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	approver := operations.ApproverFunc(func(_ context.Context, r *operations.ApprovalRequest) (operations.Decision, error) {
		fmt.Printf("%s asks (revision %d); demo: approving on the User's behalf\n", r.Company, r.Revision)
		return operations.Approve, nil
	})
	ops, _ := operations.New(sess, &operations.Options{Approver: approver})
	req, _ := http.NewRequest("POST", company.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges",
		strings.NewReader(`{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`))
	req.Header.Set("Content-Type", "application/json")
	op, _, err := ops.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := ops.Approve(ctx, op) // OPS 5.1 applies however it is confirmed
	if err != nil {
		fmt.Println(err)
		return
	}

	jar, _ := cookiejar.New(nil)
	web := &http.Client{Transport: company.Client().Transport, Jar: jar}
	pressConfirm := operations.WebsiteConfirmerFunc(func(ctx context.Context, w *operations.WebsiteConfirm) error {
		// Join the browser to the Session, landing on the operation's page (spec 5).
		assertion, err := sess.SignBrowserAssertion(w.URL)
		if err != nil {
			return err
		}
		page, err := web.PostForm(assertion.Endpoint, url.Values{"assertion": {assertion.Value()}})
		if err != nil {
			return err
		}
		page.Body.Close()
		// The page's confirm form, for the approved revision only: a
		// Company with newer terms refuses it.
		resp, err := web.PostForm(w.URL+"/confirm", url.Values{"revision": {strconv.Itoa(w.Revision)}, "approved_by": {string(w.ApprovedBy)}})
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	done, err := ops.Confirm(ctx, a, &operations.ConfirmOptions{Website: pressConfirm})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("final:", done.State, "- revision", done.Confirmation.Revision, "approved by", done.Confirmation.ApprovedBy)
	fmt.Println(done.Result.Summary)
	// Output:
	// Example Company asks (revision 1); demo: approving on the User's behalf
	// final: succeeded - revision 1 approved by user
	// Exchange placed. The Stormline Insulated Jacket (M) ships today, and a return label for the original jacket was emailed. $70.00 was charged to the card ending in 4242.
}
