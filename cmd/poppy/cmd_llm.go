package main

// poppy mcp-server and poppy ask: the Personal Agent's tools (package
// llmtools) for a model. mcp-server serves them to an MCP host over stdio,
// with the command's own keystore, so that "poppy signin" and the server
// share sign-ins; approvals go to the host's UI as MCP elicitations
// (llmtools.ElicitationApprover), refused when the host can't elicit.
// ask runs the tool loop against an OpenAI-compatible chat-completions
// endpoint; approvals are asked on the terminal as "ops confirm" does, a
// typed "yes", and never from a stdin that is not a terminal. The model
// never approves anything: confirming is not one of its tools.
//
// The SDK's SSRF guard applies to the Agent's client for Company hosts;
// the model client is a separate plain client, so that a model server on
// loopback (llama.cpp, Ollama) can be reached.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
)

func addLLMCommands(root *cobra.Command, a *app) {
	root.AddCommand(newMCPServerCmd(a), newAskCmd(a))
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func newMCPServerCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp-server [DOMAIN...]",
		Short: "Serve your Personal Agent's tools to an MCP host over stdio",
		Long: `mcp-server serves the Personal Agent's tools (discover a Company, sign in,
list and read operations, ask your approval, and every Company's API and MCP
tools) to an MCP host (an LLM application) over stdio. Companies named as
arguments are added at the start; the model adds others with
poppy_discover_company.

Sign-ins are those of "poppy signin" (the same keystore and profile). An
operation a Company proposes is approved only by you, in the host's own UI
(MCP elicitation); a host that cannot ask you gets a refusal. The model can
never approve.

Host configuration:

  {"mcpServers": {"poppy": {"command": "poppy", "args": ["mcp-server"]}}}`,
		GroupID: "apis",
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			agent, err := a.loadAgent(ctx)
			if err != nil {
				return err
			}
			k, err := llmtools.New(agent, a.profile, &llmtools.Options{Approver: llmtools.ElicitationApprover, Logger: a.log})
			if err != nil {
				return err
			}
			defer k.Close()
			for _, d := range args {
				if _, err := k.AddCompany(ctx, d); err != nil {
					return err
				}
			}
			in, ok := a.stdin.(io.ReadCloser)
			if !ok {
				in = io.NopCloser(a.stdin)
			}
			srv := llmtools.NewMCPServer(k, nil)
			err = srv.Run(ctx, &mcp.IOTransport{Reader: in, Writer: nopWriteCloser{a.stdout}})
			if err != nil && (ctx.Err() != nil || errors.Is(err, io.EOF)) {
				return nil // the host closed the connection, or Ctrl-C
			}
			return err
		},
	}
}

// askTimeout bounds each model call.
const askTimeout = 5 * time.Minute

func newAskCmd(a *app) *cobra.Command {
	var baseURL, model string
	var maxSteps int
	cmd := &cobra.Command{
		Use:   "ask DOMAIN TASK",
		Short: "Let a model do a task at a Company with your Personal Agent's tools",
		Long: `ask gives TASK to a model behind an OpenAI-compatible chat-completions
endpoint (--base-url; local servers such as llama.cpp or Ollama work) with
the Personal Agent's tools and those of DOMAIN, runs the tools it calls, and
shows each step as it happens (with --json, one JSON line per step, then the
answer). The API key is read from OPENAI_API_KEY and never printed.

An operation the Company proposes is done only if you approve it here: you
are asked on the terminal and only a typed "yes" approves; without a
terminal on stdin nothing is approved. The model can never approve.
--max-steps bounds the model calls.`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if model == "" {
				return usageError{errors.New("poppy: --model is required")}
			}
			if maxSteps < 1 || maxSteps > 1000 {
				return usageError{errors.New("poppy: --max-steps must be between 1 and 1000")}
			}
			u, err := url.Parse(baseURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
				return usageError{errors.New("poppy: --base-url must be an http(s) URL such as https://api.openai.com/v1/")}
			}
			agent, err := a.loadAgent(ctx)
			if err != nil {
				return err
			}
			k, err := llmtools.New(agent, a.profile, &llmtools.Options{
				Approver: operations.ApproverFunc(a.approveOnTerminal), Logger: a.log})
			if err != nil {
				return err
			}
			defer k.Close()
			if _, err := k.AddCompany(ctx, args[0]); err != nil {
				return err
			}
			opts := []option.RequestOption{
				option.WithBaseURL(baseURL),
				option.WithHTTPClient(&http.Client{Timeout: askTimeout}),
				option.WithMaxRetries(1),
			}
			if key := a.env.getenv("OPENAI_API_KEY"); key != "" {
				opts = append(opts, option.WithAPIKey(key))
			} else {
				opts = append(opts, option.WithAPIKey("none"))
			}
			client := openai.NewClient(opts...)
			answer, err := k.Ask(ctx, client, args[1], &llmtools.AskOptions{
				Model: model, MaxSteps: maxSteps, OnStep: a.printStep})
			if err != nil {
				return err
			}
			if a.out.json {
				a.out.emit(map[string]string{"answer": answer})
			} else {
				a.out.printf("%s\n", esc(answer))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&baseURL, "base-url", "https://api.openai.com/v1/", "the OpenAI-compatible endpoint")
	f.StringVar(&model, "model", "", "the model name (required)")
	f.IntVar(&maxSteps, "max-steps", 16, "the most model calls")
	return cmd
}

// approveOnTerminal is approve (cmd_ops.go), but never from a stdin that
// is not a terminal, with or without --json: the model drives ask, and a
// piped stdin must not answer for the User.
func (a *app) approveOnTerminal(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	if !isTerminal(a.stdin) {
		fmt.Fprintln(a.out.prompt(), "poppy: the Company proposes an operation; approval needs your answer on a terminal, so it is not approved")
		return operations.Decline, errNoTerminal
	}
	return a.approve(ctx, req)
}

// printStep shows one step of ask as it happens.
func (a *app) printStep(s llmtools.Step) {
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
