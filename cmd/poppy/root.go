package main

// The command tree and what every command shares: global flags, the
// keystore, the identity and the Agent, opened once per run on first use.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

// app holds one run's flags, output and lazily opened state.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            *environment

	// Global flags.
	profile       string
	statePath     string
	useKeyring    bool
	jsonOut       bool
	allowLoopback bool
	verbose       bool

	out    *output
	log    *slog.Logger
	store  keystore.Store
	closer func()
	agent  *poppy.Agent
	cfg    *identityConfig
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, env *environment) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr, env: env, log: slog.New(slog.DiscardHandler)}
}

func (a *app) close() {
	if a.closer != nil {
		a.closer()
	}
}

// newRootCmd builds the command tree. Each command group lives in its own
// file (cmd_*.go) and adds itself here with one line.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "poppy",
		Short: "A Personal Agent on the command line",
		Long: `poppy acts for you at a Company through the Personal Agent Protocol (Poppy):
it discovers what the Company offers, keeps a Session there, signs you in to
your account, calls its APIs, asks you before any operation it proposes is
done, browses its website in a headless Chromium joined to your Session, and
shows what is kept, with every secret in the keystore.

Exit codes: 0 ok, 1 error, 2 usage error, 3 sign-in needed, 4 declined by the User.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.setup(cmd) },
	}
	f := root.PersistentFlags()
	f.StringVar(&a.profile, "profile", "", "the local User to act for (default: $POPPY_PROFILE, else your OS user name)")
	f.StringVar(&a.statePath, "state", "", "the keystore file (default: poppy/keystore.db in your config directory)")
	f.BoolVar(&a.useKeyring, "keyring", false, "seal secrets in the keystore with a key kept in the OS keyring")
	f.BoolVar(&a.jsonOut, "json", false, "print JSON (JSON Lines for progress) instead of text")
	f.BoolVar(&a.allowLoopback, "unsafe-allow-loopback-http", false, "allow http:// on loopback addresses, for development only")
	f.BoolVar(&a.verbose, "verbose", false, "log debug records to stderr (secrets are never logged)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddGroup(&cobra.Group{ID: "agent", Title: "Your agent's identity:"},
		&cobra.Group{ID: "company", Title: "Companies and sign-in:"})
	addIdentityCommands(root, a)                             // cmd_identity.go: init, identity, serve-identity
	addDiscoverCommand(root, a)                              // cmd_discover.go
	addSessionCommand(root, a)                               // cmd_session.go
	addSignInCommand(root, a)                                // cmd_signin.go
	addStatusCommands(root, a)                               // cmd_status.go: status, signout
	addAPICommands(root, a)                                  // cmd_api.go: apis, api, mcp
	addOpsCommands(root, a)                                  // cmd_ops.go: ops, permissions
	addBrowseCommand(root, a)                                // cmd_browse.go
	addChatCommand(root, a)                                  // cmd_chat.go
	addLLMCommands(root, a)                                  // cmd_llm.go: mcp-server, ask
	root.AddCommand(newCmdCheck(a, nil), newCmdFake(a, nil)) // cmd_check.go, cmd_fake.go

	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	return root
}

// wrapArgs makes argument-count errors usage errors (exit code 2).
func wrapArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	if v == nil {
		return nil
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// setup applies the global flags before any command runs.
func (a *app) setup(cmd *cobra.Command) error {
	a.out = newOutput(a.stdout, a.stderr, a.jsonOut, a.env.getenv)
	if a.verbose {
		a.log = slog.New(newRedactingHandler(a.stderr))
	}
	if a.allowLoopback {
		a.out.warn("WARNING: --unsafe-allow-loopback-http allows plain http:// to loopback addresses. " +
			"The protocol requires HTTPS: use this only against a Company under development on this machine.")
	}
	if a.profile == "" {
		a.profile = defaultProfile(a.env.getenv)
	}
	if strings.TrimSpace(a.profile) == "" {
		return usageError{errors.New("--profile is empty")}
	}
	return nil
}

func defaultProfile(getenv func(string) string) string {
	if p := getenv("POPPY_PROFILE"); p != "" {
		return p
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "default"
}

// openStore opens the keystore once.
func (a *app) openStore() (keystore.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	s, closer, err := openStore(a.statePath, a.useKeyring)
	if err != nil {
		return nil, err
	}
	a.store, a.closer = s, closer
	return s, nil
}

// loadAgent opens the keystore, loads the identity "poppy init" made and
// returns the Agent.
func (a *app) loadAgent(ctx context.Context) (*poppy.Agent, error) {
	if a.agent != nil {
		return a.agent, nil
	}
	store, err := a.openStore()
	if err != nil {
		return nil, err
	}
	cfg, err := readIdentityConfig(ctx, store)
	if err != nil {
		return nil, err
	}
	keys, err := poppy.LoadSigningKeys(ctx, store, signingKeysName)
	if err != nil {
		return nil, err
	}
	id, err := cfg.identity(keys)
	if err != nil {
		return nil, err
	}
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{
		Store:                   store,
		Logger:                  a.log,
		UnsafeAllowLoopbackHTTP: a.allowLoopback,
	})
	if err != nil {
		return nil, err
	}
	a.agent, a.cfg = agent, cfg
	return agent, nil
}

// company resolves domain and records it for "poppy status".
func (a *app) company(ctx context.Context, domain string) (*poppy.Company, error) {
	agent, err := a.loadAgent(ctx)
	if err != nil {
		return nil, err
	}
	c, err := agent.Company(ctx, domain)
	if err != nil {
		return nil, err
	}
	if err := rememberCompany(ctx, a.store, a.profile, c); err != nil {
		a.log.Debug("poppy: remembering the Company", "err", err)
	}
	return c, nil
}

// cmdline returns a poppy command line to suggest, with the global flags
// this run was given that the suggestion needs.
func (a *app) cmdline(args ...string) string {
	parts := []string{"poppy"}
	parts = append(parts, args...)
	if a.profile != "" && a.profile != defaultProfile(a.env.getenv) {
		parts = append(parts, "--profile", shellQuote(a.profile))
	}
	if a.statePath != "" {
		parts = append(parts, "--state", shellQuote(a.statePath))
	}
	if a.useKeyring {
		parts = append(parts, "--keyring")
	}
	if a.allowLoopback {
		parts = append(parts, "--unsafe-allow-loopback-http")
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@=+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
