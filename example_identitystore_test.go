package poppy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// A script keeps its signing key in its keystore: created on the first
// run, the same on every later one; a rotation keeps the previous key
// published.
func ExampleLoadSigningKeys() {
	ctx := context.Background()
	store := keystore.NewMemory() // a script would use sqlitestore.Open
	keys, err := poppy.LoadSigningKeys(ctx, store, "")
	if err != nil {
		log.Fatal(err)
	}
	again, _ := poppy.LoadSigningKeys(ctx, store, "")
	fmt.Println("same key on the next run:", again[0].KeyID() == keys[0].KeyID())

	rotated, err := poppy.RotateSigningKeys(ctx, store, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("keys published after rotation:", len(rotated), "previous kept:", rotated[1].KeyID() == keys[0].KeyID())

	identity, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "https://agent.example/poppy/agent.json", Keys: rotated})
	if err != nil {
		log.Fatal(err)
	}
	// Serve identity.Handler at https://agent.example/poppy/ for Companies.
	fmt.Println(identity.JWKSURI())
	// Output:
	// same key on the next run: true
	// keys published after rotation: 2 previous kept: true
	// https://agent.example/poppy/jwks.json
}

// What the keystore holds for a User at a Company, without a request.
func ExampleAgent_StoredSessions() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	ctx := context.Background()
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Session(ctx, "local-user-42", nil); err != nil {
		log.Fatal(err)
	}
	sessions, err := agent.StoredSessions(ctx, "local-user-42", c.Issuer())
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range sessions {
		fmt.Println(s.Name, "signed in:", s.SignedIn)
	}
	tokens, _ := agent.StoredAccountTokens(ctx, "local-user-42", c.Issuer())
	fmt.Println("account tokens:", len(tokens))
	// Output:
	// default signed in: false
	// account tokens: 0
}
