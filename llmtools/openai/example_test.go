package openai_test

import (
	"fmt"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/llmtools"
	llmopenai "github.com/poppyproto/poppy/llmtools/openai"
	"github.com/poppyproto/poppy/poppytest"
)

// A Toolkit's tools in the OpenAI chat-completions format, for
// ChatCompletionNewParams.Tools; Run answers the model's tool calls and
// Ask runs the whole loop.
func ExampleTools() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	key, _ := poppy.GenerateSigningKey()
	identity, _ := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json", Keys: []*poppy.SigningKey{key},
		Extensions: map[string]string{"operations": "1"},
	})
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{HTTPClient: company.Client(), Clock: company.Clock()})
	k, _ := llmtools.New(agent, "local-user-42", nil)
	defer k.Close()
	tools := llmopenai.Tools(k)
	fmt.Println(len(tools), tools[0].OfFunction.Function.Name)
	// Output:
	// 8 poppy_discover_company
}
