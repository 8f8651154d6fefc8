package api_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/poppytest"
)

// A token asked for without a proof, for an MCP server, whose token_type
// the Company says is DPoP: the SDK refuses the answer, and no MCP request
// carries the token.
func TestPA_4_2_12_MCPTokenTypeDPoP(t *testing.T) {
	env, sess := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env.Srv.Tokens().SetType("DPoP") // the next token response: the Bearer one
	m, err := api.ConnectMCP(ctx, sess, entry(t, sess.Company(), api.TypeMCP), nil)
	if err == nil {
		defer m.Close()
		_, err = m.CallTool(ctx, "search_products", map[string]any{"query": "x"})
	}
	// PA-4.2-12
	if !errors.Is(err, poppy.ErrUnexpectedTokenType) {
		t.Errorf("MCP with a proof-less token typed DPoP: %v, want ErrUnexpectedTokenType", err)
	}
	bearer := 0
	for _, r := range env.Requests(poppytest.EndpointToken) {
		if r.Form.Get("resource") == env.Srv.EndpointURL(poppytest.EndpointMCP) {
			bearer++
		}
	}
	if bearer == 0 {
		t.Fatal("no Bearer token was asked for")
	}
	for _, r := range env.Requests(poppytest.EndpointMCP) {
		if r.AccessToken != "" || r.Header.Get("Authorization") != "" {
			t.Errorf("%s %s sent with a token (%s)", r.Method, r.Path, r.AuthScheme)
		}
	}
}
