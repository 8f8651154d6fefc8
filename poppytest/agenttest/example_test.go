package agenttest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
)

func ExampleNewAgent() {
	srv, err := poppytest.New(nil) // in a test: srv := poppytest.NewServer(t, nil), closed at cleanup
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	agent, identity, err := agenttest.NewAgent(srv, nil) // in a test: agenttest.New(t, srv, nil)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		log.Fatal(err)
	}
	sess, err := c.Session(ctx, "alice", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := sess.HTTPClient().Get(srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(identity.ClientID())
	fmt.Println(resp.Status)
	// Output:
	// https://agent.test/agent.json
	// 200 OK
}
