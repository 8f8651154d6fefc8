// Command quickstart runs the main job of the Poppy Go SDK against the
// embedded fake Company from package poppytest, printing each step:
// discovery, a Session, a DPoP-bound API call, a Device Sign-In answered by
// the fake Company's programmable User, an account call that needs
// poppy:read, the operations extension's jacket exchange (proposed,
// approved, confirmed and tracked to its result; operations.go), the
// Company's APIs: an OpenAPI operation and an MCP tool (apis.go), and a
// short conversation with the Company Agent, streamed (conversation.go).
//
//	go run ./examples/quickstart
//
// The fake Company serves example.test, auth.example.test and
// api.example.test over real TLS from one loopback listener, and the agent's
// own identity documents at agent.test; its HTTP client trusts the fake's
// certificate and routes those names to it, so the SDK's HTTPS and domain
// checks run exactly as they would against a real Company.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	step := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	company, err := poppytest.New(&poppytest.Options{Conversations: poppytest.ConversationOptions{Streaming: true, TextDeltas: true}})
	if err != nil {
		return err
	}
	defer company.Close()
	step("fake Company is up: %s (issuer %s)", company.URL(), company.Issuer())

	// The agent's identity: its client_id URL, where its public keys are,
	// and the key that signs its assertions (spec 4.1).
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		return err
	}
	identity, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     "https://agent.test/agent.json",
		ClientName:   "Quickstart Agent",
		JWKSURI:      "https://agent.test/jwks.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"},
		Keys:         []*poppy.SigningKey{key},
		Extensions:   map[string]string{"operations": "1"},
	})
	if err != nil {
		return err
	}
	company.HandleAgent("agent.test", identity.Handler(nil))
	step("agent identity %s serves its metadata and JWKS (key %s)", identity.ClientID(), key.KeyID())

	// A persistent keystore would be sqlitestore.Open(path, nil).
	agent, err := poppy.NewAgent(identity, &poppy.AgentOptions{
		Store:      keystore.NewMemory(),
		HTTPClient: company.Client(),
		Clock:      company.Clock(),
	})
	if err != nil {
		return err
	}

	// Discovery (spec 3): poppy.json, then the issuer's metadata, with the
	// issuer and poppy_domains checks.
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		return err
	}
	step("discovered %q: issuer %s, token endpoint %s", c.Name(), c.Issuer(), c.Metadata().TokenEndpoint)
	step("  sign-in types offered: %s", strings.Join(c.SignInTypes(), ", "))

	// A Session for one local User (spec 4.2): the User ID and DPoP key are
	// created once and kept in the store.
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		return err
	}
	step("started Session %s for User ID %s (signed in: %v)", sess.ID(), sess.UserID(), sess.SignedIn())
	step("  DPoP key thumbprint %s", sess.Thumbprint())

	// An API call: the transport adds the Session Token and a fresh proof.
	resp, err := sess.HTTPClient().Get(company.EndpointURL(poppytest.EndpointAPI) + "/products")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	step("GET %s/products → %s", company.EndpointURL(poppytest.EndpointAPI), resp.Status)
	step("  %s", strings.TrimSpace(string(body)))

	// Device Sign-In (spec 4.6): the agent shows the User a link and a code;
	// here the fake Company's programmable User opens it and approves.
	prompter := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		step("sign-in: the User is asked to open %s and enter %s", p.VerificationURI, p.UserCode)
		_, err := company.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	res, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, prompter)
	if err != nil {
		return err
	}
	if err := res.Require("poppy:read"); err != nil {
		return err
	}
	step("signed in: granted %s; the Account Token is in the keystore", strings.Join(res.Granted, " "))

	resp, err = sess.HTTPClient().Get(company.EndpointURL(poppytest.EndpointAPI) + "/orders")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	step("GET %s/orders → %s", company.EndpointURL(poppytest.EndpointAPI), resp.Status)
	step("  %s", strings.TrimSpace(string(body)))

	if err := exchangeJacket(ctx, step, company, sess); err != nil {
		return err
	}
	if err := apis(ctx, sess, step); err != nil {
		return err
	}

	// A browser joined to the Session (spec 5) is examples/browser, a
	// program of its own: the DevTools Protocol client it needs is large,
	// and of no use without Chromium.
	step("browser: go run ./examples/browser joins a headless Chromium to a Session (it needs the Debian package chromium)")

	if err := converse(ctx, step, sess); err != nil {
		return err
	}

	// The fake's own fetches of the agent's metadata and JWKS are
	// Internal: the list shows what the agent and the User's browser sent.
	var sent []poppytest.Request
	for _, r := range company.Requests() {
		if !r.Internal {
			sent = append(sent, r)
		}
	}
	step("the fake Company answered %d requests from the agent and the User's browser, and recorded %d rule violations", len(sent), len(company.Violations()))
	for _, r := range sent {
		step("  %s %s → %d", r.Method, redact(r.URL), r.Status)
	}
	if v := company.Violations(); len(v) > 0 {
		return fmt.Errorf("the fake Company recorded violations: %v", v)
	}
	return nil
}

// redact keeps a logged URL's path and drops its query, which may carry a
// one-time code or state.
func redact(raw string) string {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		return raw[:i] + "?…"
	}
	return raw
}
