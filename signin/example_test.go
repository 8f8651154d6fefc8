package signin_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
	"github.com/poppyproto/poppy/signin"
)

// Device Sign-In: the application shows the User a link and a code; here
// the fake Company's programmable User opens the link and approves.
func ExampleDevice() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent, _, err := agenttest.NewAgent(company, nil) // the fake's client and clock; the second result is the Identity served on agent.test, not an error
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	prompter := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		fmt.Printf("Open %s and enter the code shown\n", p.VerificationURI)
		_, err := company.Browse(ctx, p.VerificationURIComplete) // the User, at the Company
		return err
	}}
	res, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, prompter)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted:", res.Granted, "signed in:", sess.SignedIn())
	// Output:
	// Open https://auth.example.test/device and enter the code shown
	// granted: [poppy:read poppy:write] signed in: true
}

// Mediated Sign-In: the User gives the agent credentials for the Company.
func ExampleMediated() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent, _, err := agenttest.NewAgent(company, nil) // the fake's client and clock; the second result is the Identity served on agent.test, not an error
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	prompter := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		for _, f := range p.Fields {
			fmt.Printf("ask for %s (secret: %v)\n", f.Label, f.Secret)
		}
		creds := signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"})
		fmt.Println(creds) // secret values never print
		return creds, nil
	}}
	res, err := signin.Mediated(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, prompter)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted:", res.Granted)
	// Output:
	// ask for Email (secret: false)
	// ask for Password (secret: true)
	// signin.Credentials{email: "user@example.test", password: [REDACTED]}
	// granted: [poppy:read]
}

// Direct Sign-In: the User signs in on the Company's page in their browser,
// and the Company sends the browser back to the agent's redirect URI,
// which Direct.Handler serves.
func ExampleDirect() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent, identity, err := agenttest.NewAgent(company, nil) // redirect URI https://agent.test/oauth/callback
	if err != nil {
		log.Fatal(err)
	}
	direct, err := signin.NewDirect(agent, nil)
	if err != nil {
		log.Fatal(err)
	}
	// The identity's handler serves the metadata, the JWKS and, behind
	// them, the redirect URI.
	company.HandleAgent("agent.test", identity.Handler(direct.Handler()))
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	prompter := signin.PrompterFuncs{OpenURLFunc: func(ctx context.Context, p *signin.URLPrompt) error {
		fmt.Println("open the sign-in page of", p.Company)
		// The User's browser: the Company's page, then back to the agent.
		back, err := company.Browse(ctx, p.URL)
		if err != nil {
			return err
		}
		resp, err := company.Client().Get(back)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}}
	res, err := direct.SignIn(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, prompter)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted:", res.Granted)
	// Output:
	// open the sign-in page of Example Company
	// granted: [poppy:read]
}

// Direct Sign-In in a web application: the "sign in" handler calls Start
// and redirects the browser; after the Company sends it back, Handler
// completes the sign-in and DirectOptions.Done answers the browser.
func ExampleDirect_Start() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent, identity, err := agenttest.NewAgent(company, nil)
	if err != nil {
		log.Fatal(err)
	}
	direct, err := signin.NewDirect(agent, &signin.DirectOptions{
		Done: func(w http.ResponseWriter, r *http.Request, res *poppy.SignInResult, err error) {
			// Send the browser on to the application's own pages.
			if err != nil {
				http.Redirect(w, r, "/sign-in-failed", http.StatusSeeOther)
				return
			}
			fmt.Println("signed in:", res.User, res.Granted)
			http.Redirect(w, r, "/account", http.StatusSeeOther)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	company.HandleAgent("agent.test", identity.Handler(direct.Handler()))
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "alice", nil)

	// The application's "sign in" handler:
	st, err := direct.Start(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}})
	if err != nil {
		log.Fatal(err)
	}
	if st.Result != nil {
		fmt.Println("signed in already") // no URL: don't redirect
		return
	}
	// direct.Redirect(w, r, st): a 302 to st.URL, with a cookie that binds
	// the sign-in to this browser when DirectOptions.StateCookie is set.

	// The User's browser: the Company's page, then back to the agent.
	back, err := company.Browse(ctx, st.URL)
	if err != nil {
		log.Fatal(err)
	}
	browser := *company.Client()
	browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := browser.Get(back)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Location"))

	st, _ = direct.Start(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}})
	fmt.Println("next time, reused:", st.Result.Reused)
	// Output:
	// signed in: alice [poppy:read]
	// 303 /account
	// next time, reused: true
}

// A ready prompter for programs in a terminal: it prints links and codes
// and reads the User's answers, secrets without echo on a terminal.
func ExampleTerminalPrompter() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	key, _ := poppy.GenerateSigningKey()
	identity, _ := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json", Keys: []*poppy.SigningKey{key},
	})
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{HTTPClient: company.Client(), Clock: company.Clock()})
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	// A real program passes os.Stdout and os.Stdin.
	var screen strings.Builder
	answers := strings.NewReader("user@example.test\ncorrect horse\n")
	res, err := signin.Mediated(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, signin.TerminalPrompter(&screen, answers))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.TrimSpace(screen.String()))
	fmt.Println("granted:", res.Granted)
	// Output:
	// Sign in to Example Company.
	// This asks for:
	//   - poppy:read: View account information, such as orders and bookings.
	// Email: Password:
	// granted: [poppy:read]
}
