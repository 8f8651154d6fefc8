package main

// poppy mcp-server and poppy ask: the Personal Agent's tools (package
// llmtools) for a model. mcp-server serves them to an MCP host over stdio,
// with the command's own keystore, so that "poppy signin" and the server
// share sign-ins; approvals go to the host's UI as MCP elicitations
// (llmtools.Options.Elicitation), refused when the host can't elicit.
// ask runs the tool loop against an OpenAI-compatible chat-completions
// endpoint; approvals are asked on the terminal as "ops confirm" does, a
// typed "yes", and never from a stdin that is not a terminal. The model
// never approves anything: confirming is not one of its tools.
//
// ask's run is compiled only with the build tag "openai" (ask_openai.go):
// the OpenAI client it is built on (llmtools/openai, openai-go) took 20
// minutes and 2.3 GB to compile on a 2-core machine and most of the
// binary's 67 MB, a cost a person who wants sign-in, api, chat and ops
// should not pay. Without the tag the command is listed, checks its flags
// and says how to build it (ask_stub.go). mcp-server stays in every build:
// it needs only llmtools and the MCP SDK, which "poppy mcp" (package api)
// compiles anyway.

import (
	"context"
	"errors"
	"io"
	"net/url"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy/llmtools"
)

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type mcpServerOptions struct {
	app     *app
	Domains []string
}

func newCmdMCPServer(a *app, runF func(context.Context, *mcpServerOptions) error) *cobra.Command {
	opts := &mcpServerOptions{app: a}
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
(MCP elicitation). A host that cannot ask you approves nothing: the model is
told to show you the operation's summary and terms and to have you run
"poppy ops confirm DOMAIN ID" in a terminal. The model can never approve.

Host configuration:

  {"mcpServers": {"poppy": {"command": "poppy", "args": ["mcp-server"]}}}`,
		Example: `  poppy mcp-server example.com
  poppy --profile alice mcp-server example.com shop.example`,
		GroupID: "apis",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domains = args
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runMCPServer(cmd.Context(), opts)
		},
	}
}

// approveElsewhere is where the User approves an operation the model's
// host could not ask them about.
func (a *app) approveElsewhere(domain, id string) string {
	return a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(id))
}

func runMCPServer(ctx context.Context, opts *mcpServerOptions) error {
	a := opts.app
	agent, err := a.loadAgent(ctx)
	if err != nil {
		return err
	}
	k, err := llmtools.New(agent, a.profile, &llmtools.Options{Elicitation: true, ApproveElsewhere: a.approveElsewhere, Logger: a.log})
	if err != nil {
		return err
	}
	defer k.Close()
	for _, d := range opts.Domains {
		if _, err := k.AddCompany(ctx, d); err != nil {
			return err
		}
	}
	srv := llmtools.NewMCPServer(k, nil)
	err = srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(a.in), Writer: nopWriteCloser{a.stdout}})
	if err != nil && (ctx.Err() != nil || errors.Is(err, io.EOF)) {
		return nil // the host closed the connection, or Ctrl-C
	}
	return err
}

// askInstall is how to build a poppy that runs ask.
const askInstall = "go install -tags openai github.com/poppyproto/poppy/cmd/poppy@latest (in a clone of the SDK: go install -tags openai ./cmd/poppy)"

// askShortNote marks ask in "poppy --help" when this build does not run
// it.
func askShortNote() string {
	if askBuilt {
		return ""
	}
	return " (needs a build with -tags openai)"
}

// askBuildNote says whether this build runs ask, for ask --help.
func askBuildNote() string {
	if askBuilt {
		return "\nThis poppy was built with it."
	}
	return "\nThis poppy was built without it: poppy ask only says so."
}

type askOptions struct {
	app      *app
	Domain   string
	Task     string
	BaseURL  string
	Model    string
	MaxSteps int
}

func newCmdAsk(a *app, runF func(context.Context, *askOptions) error) *cobra.Command {
	opts := &askOptions{app: a}
	cmd := &cobra.Command{
		Use:   "ask DOMAIN TASK",
		Short: "Let a model do a task at a Company with your Personal Agent's tools" + askShortNote(),
		Long: `ask gives TASK to a model behind an OpenAI-compatible chat-completions
endpoint (--base-url; local servers such as llama.cpp or Ollama work) with
the Personal Agent's tools and those of DOMAIN, runs the tools it calls, and
shows each step as it happens (with --json, one JSON line per step, then the
answer). The API key is read from OPENAI_API_KEY and never printed.

An operation the Company proposes is done only if you approve it here, as
"poppy ops confirm" asks: on the terminal, only a typed "yes" approves and
only a typed "no" declines; no answer leaves it proposed. Without a
terminal on stdin nothing is asked and nothing approved: the operation
stays proposed, for "poppy ops confirm DOMAIN ID" later. The model can
never approve. --max-steps bounds the model calls.

ask is compiled in only when poppy is built with the tag openai, since its
OpenAI client is large:
  ` + askInstall + askBuildNote(),
		Example: `  OPENAI_API_KEY=... poppy ask example.com "exchange my jacket for a warmer one" --model gpt-4.1
  poppy ask example.com "what did I order last month?" --base-url http://127.0.0.1:8080/v1/ --model local
  poppy --json ask example.com "list my orders" --model gpt-4.1-mini --max-steps 4`,
		GroupID:           "apis",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain, opts.Task = args[0], args[1]
			if opts.Model == "" {
				return usageError{err: errors.New("poppy: --model is required")}
			}
			if opts.MaxSteps < 1 || opts.MaxSteps > 1000 {
				return usageError{err: errors.New("poppy: --max-steps must be between 1 and 1000")}
			}
			u, err := url.Parse(opts.BaseURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
				return usageError{err: errors.New("poppy: --base-url must be an http(s) URL such as https://api.openai.com/v1/")}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runAsk(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.BaseURL, "base-url", "https://api.openai.com/v1/", "the OpenAI-compatible endpoint")
	f.StringVar(&opts.Model, "model", "", "the model name (required)")
	f.IntVar(&opts.MaxSteps, "max-steps", 16, "the most model calls")
	return cmd
}
