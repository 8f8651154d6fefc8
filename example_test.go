package poppy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
)

// exampleAgent returns an agent for examples, wired to a fake Company:
// the fake's client and clock, and the agent's identity served on
// agent.test.
func exampleAgent(company *poppytest.Server, opts *poppy.AgentOptions) *poppy.Agent {
	o := &agenttest.Options{}
	if opts != nil {
		o.Agent = *opts
	}
	agent, _, err := agenttest.NewAgent(company, o) // the second result is the agent's Identity, not an error
	if err != nil {
		log.Fatal(err)
	}
	return agent
}

func ExampleNewIdentity() {
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		log.Fatal(err)
	}
	identity, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     "https://agent.example/agent.json",
		ClientName:   "Example Agent",
		RedirectURIs: []string{"https://agent.example/oauth/callback"},
		Keys:         []*poppy.SigningKey{key},
		Extensions:   map[string]string{"operations": "1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(identity.ClientID())
	fmt.Println(identity.JWKSURI())
	// Serve identity.Handler(nil) on agent.example so Companies can fetch both.
	// Output:
	// https://agent.example/agent.json
	// https://agent.example/jwks.json
}

func ExampleAgent_Company() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)

	c, err := agent.Company(context.Background(), "example.test")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Name())
	fmt.Println(c.Issuer())
	fmt.Println(c.SignInTypes())
	// Output:
	// Example Company
	// https://auth.example.test
	// [direct device mediated]
}

func ExampleCompany_Session() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, &poppy.AgentOptions{Store: keystore.NewMemory()})
	ctx := context.Background()

	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		log.Fatal(err)
	}
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("signed in:", sess.SignedIn())
	// Output:
	// signed in: false
}

func ExampleSession_HTTPClient() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	ctx := context.Background()

	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	// Every request carries the Session Token and a fresh DPoP proof.
	resp, err := sess.HTTPClient().Get("https://api.example.test/products")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	fmt.Println(resp.Status)
	// Output:
	// 200 OK
}

func ExampleResponseError() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	ctx := context.Background()

	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	// The transport returns the Company's answer as a response, whatever
	// its status; ResponseError reads the protocol error out of it.
	resp, err := sess.HTTPClient().Get("https://api.example.test/orders")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
	err = poppy.ResponseError(resp)
	var pe *poppy.Error
	if errors.Is(err, poppy.ErrSignInRequired) && errors.As(err, &pe) {
		fmt.Println("sign in with one of:", pe.SignInTypes)
	}
	// Output:
	// 403 Forbidden
	// sign in with one of: [direct device mediated]
}

func ExampleError() {
	company, err := poppytest.New(&poppytest.Options{Clients: poppytest.ClientOptions{RequireRegistration: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	ctx := context.Background()

	c, _ := agent.Company(ctx, "example.test")
	_, err = c.Session(ctx, "local-user-42", nil)
	var perr *poppy.Error
	if errors.As(err, &perr) {
		fmt.Println(perr.Code, perr.Status, errors.Is(err, poppy.ErrInvalidClient))
	}
	// Output:
	// invalid_client 401 true
}
