package llmtools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// exampleAgent starts a fake Company and an agent that lists the
// operations extension.
func exampleAgent() (*poppytest.Server, *poppy.Agent) {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	key, _ := poppy.GenerateSigningKey()
	identity, _ := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json", Keys: []*poppy.SigningKey{key},
		Extensions: map[string]string{"operations": "1"},
	})
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{HTTPClient: company.Client(), Clock: company.Clock()})
	return company, agent
}

// A runtime hands its model the Toolkit's tools; the model discovers a
// Company and calls its tools. An operation it proposes waits for the
// User's approval, which comes from the runtime's Approver only.
func Example() {
	ctx := context.Background()
	company, agent := exampleAgent()
	defer company.Close()

	approver := operations.ApproverFunc(func(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
		fmt.Println("User asked:", req.Summary[:33]+"…")
		return operations.Approve, nil // the User's own answer, in the runtime's UI
	})
	prompter := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := company.Browse(ctx, p.VerificationURIComplete) // the fake's User approves
		return err
	}}
	k, err := llmtools.New(agent, "local-user-42", &llmtools.Options{Approver: approver, Prompter: prompter})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()

	run := func(name, args string) map[string]any {
		out, err := k.Execute(ctx, name, json.RawMessage(args))
		if err != nil {
			log.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(out, &m)
		return m
	}
	r := run("poppy_discover_company", `{"domain":"example.test"}`)
	fmt.Println(r["company"], r["signed_in"])
	fmt.Println(run("poppy_sign_in", `{"domain":"example.test","scopes":["poppy:read","poppy:write"]}`)["sign_in"])
	for run("poppy_sign_in", `{"domain":"example.test"}`)["sign_in"] == "waiting_for_user" {
		time.Sleep(10 * time.Millisecond) // the User is signing in
	}
	r = run("example_test__mcp_request_exchange", `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`)
	op := r["operation"].(map[string]any)
	fmt.Println(op["state"], strings.SplitN(r["approval"].(string), ".", 2)[0])
	r = run("poppy_request_approval", `{"domain":"example.test","operation_id":"`+op["operation_id"].(string)+`"}`)
	fmt.Println(r["operation"].(map[string]any)["state"])
	// Output:
	// Example Company false
	// waiting_for_user
	// proposed PROPOSED, NOT DONE
	// User asked: Exchange the Stormline Jacket (M)…
	// succeeded
}
