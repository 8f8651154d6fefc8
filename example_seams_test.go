package poppy_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

// A URL from a Company's document passes the module's one check before it
// is shown or opened.
func ExampleAgent_ParseURL() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)

	for _, raw := range []string{"https://example.test/help", "http://example.test/help", "https://user@example.test/"} {
		_, err := agent.ParseURL(raw)
		fmt.Println(raw, errors.Is(err, poppy.ErrInsecureURL))
	}
	// Output:
	// https://example.test/help false
	// http://example.test/help true
	// https://user@example.test/ true
}

// Text bound for a model goes through Redact, so that no token the
// Session holds reaches it (PA-4.8-08).
func ExampleSession_Redact() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		log.Fatal(err)
	}
	tok, _ := sess.Token(ctx, nil)
	text := "the request carried Authorization: DPoP " + tok.Value()
	fmt.Println(sess.Redact(ctx, text))
	// Output:
	// the request carried Authorization: DPoP [redacted]
}

// Mediated Sign-In's steps, for an application that asks the User its own
// way (package signin's Mediated asks through a UserPrompter).
func ExampleSession_SendMediatedCredentials() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, f := range c.Document().Auth.Mediated.Fields {
		names = append(names, f.Name)
	}
	fmt.Println("fields:", strings.Join(names, ", "))
	step, err := sess.SendMediatedCredentials(ctx,
		map[string]string{"email": "user@example.test", "password": "correct horse"},
		&poppy.SignInOptions{Scopes: []string{"poppy:read"}})
	if err != nil {
		log.Fatal(err)
	}
	// A "code_required" step goes on with SendMediatedCode.
	fmt.Println(step.Status, step.Result.Granted, sess.SignedIn())
	// Output:
	// fields: email, password
	// complete [poppy:read] true
}
