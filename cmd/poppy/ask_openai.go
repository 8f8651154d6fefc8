//go:build openai

package main

// poppy ask's run, compiled with the build tag "openai" only (see
// cmd_llm.go): the tool loop is llmtools/openai's, on openai-go.
//
// The SDK's SSRF guard applies to the Agent's client for Company hosts;
// the model client is a separate plain client, so that a model server on
// loopback (llama.cpp, Ollama) can be reached.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/poppyproto/poppy/llmtools"
	llmopenai "github.com/poppyproto/poppy/llmtools/openai"
	"github.com/poppyproto/poppy/operations"
)

// askBuilt says that this build runs poppy ask.
const askBuilt = true

// askTimeout bounds each model call.
const askTimeout = 5 * time.Minute

func runAsk(ctx context.Context, opts *askOptions) error {
	a := opts.app
	agent, err := a.loadAgent(ctx)
	if err != nil {
		return err
	}
	k, err := llmtools.New(agent, a.profile, &llmtools.Options{
		Approver: operations.ApproverFunc(a.approveOnTerminal), ApproveElsewhere: a.approveElsewhere, Logger: a.log})
	if err != nil {
		return err
	}
	defer k.Close()
	if _, err := k.AddCompany(ctx, opts.Domain); err != nil {
		return err
	}
	ropts := []option.RequestOption{
		option.WithBaseURL(opts.BaseURL),
		option.WithHTTPClient(&http.Client{Timeout: askTimeout}),
		option.WithMaxRetries(1),
	}
	if key := a.env.getenv("OPENAI_API_KEY"); key != "" {
		ropts = append(ropts, option.WithAPIKey(key))
	} else {
		ropts = append(ropts, option.WithAPIKey("none"))
	}
	client := openai.NewClient(ropts...)
	answer, err := llmopenai.Ask(ctx, k, client, opts.Task, &llmopenai.AskOptions{
		Model: opts.Model, MaxSteps: opts.MaxSteps, OnStep: a.printStep})
	if err != nil {
		return err
	}
	if a.out.json {
		a.out.emit(map[string]string{"answer": answer})
	} else {
		a.out.printf("%s\n", esc(answer))
	}
	return nil
}

// approveOnTerminal is approve (cmd_ops.go), the one rule for every
// approval: the model drives ask, and a stdin that is not a terminal is
// never read for an answer, with or without --json; the operation then
// stays proposed, and the model is told where the User approves it.
func (a *app) approveOnTerminal(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	if !isTerminal(a.in) {
		fmt.Fprintln(a.out.prompt(), "poppy: the Company proposes an operation; approval needs your answer on a terminal, so it stays proposed: "+
			a.approveElsewhere(req.Domain, req.OperationID))
	}
	return a.approve(ctx, req)
}

// printStep shows one step of ask as it happens.
func (a *app) printStep(s llmopenai.Step) {
	if a.out.json {
		a.out.emit(s)
		return
	}
	switch s.Kind {
	case "model":
		if s.Text != "" {
			a.out.printf("%s %s\n", a.out.dim(fmt.Sprintf("[%d] model:", s.N)), esc(oneLine(s.Text, 2000)))
		}
	case "tool":
		a.out.printf("%s %s(%s)\n  → %s\n", a.out.dim(fmt.Sprintf("[%d] tool", s.N)), esc(s.Tool),
			esc(oneLine(string(s.Args), 500)), esc(oneLine(string(s.Result), 500)))
	}
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}
