package llmtools_test

import (
	"context"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/llmtools/internal/llmtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

const domain = "example.test"

// exchangeMCP and exchangeAPI propose the fake's exchange operation.
const (
	exchangeMCP = llmtest.ExchangeMCP
	exchangeAPI = llmtest.ExchangeAPI
	argsMCP     = llmtest.ArgsMCP
	argsAPI     = llmtest.ArgsAPI
)

// env is the fake, an agent and a Toolkit for "alice" (llmtest.Env,
// shared with the model adapters' tests).
type env = llmtest.Env

func newEnv(t *testing.T, opts *llmtools.Options, rt func(http.RoundTripper) http.RoundTripper) *env {
	t.Helper()
	return llmtest.New(t, opts, rt)
}
