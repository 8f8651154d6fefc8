package main

// The command tree and what every command shares: global flags, the
// keystore, the identity and the Agent, opened once per run on first use.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

// app is what the commands of one run share (gh's Factory): the streams,
// the global flags and the state opened on first use. Each command's
// options hold it.
type app struct {
	in             *input
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

func newApp(in *input, stdout, stderr io.Writer, env *environment) *app {
	if env == nil {
		env = &environment{}
	}
	if env.getenv == nil {
		env.getenv = func(string) string { return "" }
	}
	return &app{in: in, stdout: stdout, stderr: stderr, env: env, log: slog.New(slog.DiscardHandler)}
}

func (a *app) close() {
	if a.closer != nil {
		a.closer()
	}
}

// The groups "poppy --help" lists the commands in.
var commandGroups = []*cobra.Group{
	{ID: "agent", Title: "Your agent's identity:"},
	{ID: "company", Title: "Companies and sign-in:"},
	{ID: "apis", Title: "The Company's APIs and operations:"},
}

// commands returns the top-level commands, in the order "poppy --help"
// lists them within their groups. Each is built by its newCmdX in its
// cmd_*.go file; a new command is one line here.
func commands(a *app) []*cobra.Command {
	return []*cobra.Command{
		newCmdInit(a, nil),          // cmd_identity.go
		newCmdIdentity(a, nil),      // cmd_identity.go
		newCmdServeIdentity(a, nil), // cmd_identity.go
		newCmdDiscover(a, nil),      // cmd_discover.go
		newCmdSession(a, nil),       // cmd_session.go
		newCmdSignIn(a, nil),        // cmd_signin.go
		newCmdStatus(a, nil),        // cmd_status.go
		newCmdSignOut(a, nil),       // cmd_status.go
		newCmdAPIs(a, nil),          // cmd_api.go
		newCmdAPI(a, nil),           // cmd_api.go
		newCmdMCP(a),                // cmd_api.go: mcp tools, mcp call
		newCmdOps(a),                // cmd_ops.go: ops list, show, confirm, cancel, track
		newCmdPermissions(a),        // cmd_ops.go: permissions grant, list, revoke
		newCmdBrowse(a, nil),        // cmd_browse.go
		newCmdChat(a, nil),          // cmd_chat.go
		newCmdMCPServer(a, nil),     // cmd_llm.go
		newCmdAsk(a, nil),           // cmd_llm.go
		newCmdCheck(a, nil),         // cmd_check.go
		newCmdFake(a, nil),          // cmd_fake.go
	}
}

// newRootCmd builds the command tree.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "poppy",
		Short: "A Personal Agent on the command line",
		Long: `poppy acts for you at a Company through the Personal Agent Protocol (Poppy):
it discovers what the Company offers, keeps a Session there, signs you in to
your account, calls its APIs, asks you before any operation it proposes is
done, browses its website in a headless Chromium joined to your Session, and
shows what is kept, with every secret in the keystore.

Exit codes: 0 ok, 1 error, 2 usage error, 3 sign-in needed, 4 declined by the User,
5 no answer (the operation stays proposed), 130 interrupted (Ctrl-C).`,
		Example: `  poppy init --base-url https://agent.example/poppy/
  poppy serve-identity &
  poppy signin example.com
  poppy api example.com GET /orders
  poppy --json status`,
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
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err: err} })

	root.AddGroup(commandGroups...)
	root.AddCommand(commands(a)...)
	addBuiltinExamples(root)
	eachCommand(root, func(c *cobra.Command) {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args, c.RunE = unknownSubcommand, showHelp
		}
		c.Args = wrapArgs(c.Args)
		c.InitDefaultHelpFlag()
		plainBoolFlags(c.Flags())
		plainBoolFlags(c.PersistentFlags())
	})
	root.SetIn(a.in)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	return root
}

// addBuiltinExamples gives cobra's own help and completion commands
// examples, as every command has.
func addBuiltinExamples(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  poppy help signin\n  poppy help ops confirm"
		case "completion":
			c.Example = "  source <(poppy completion bash)\n  poppy completion zsh > \"${fpath[1]}/_poppy\""
			for _, sh := range c.Commands() {
				switch sh.Name() {
				case "bash":
					sh.Example = "  source <(poppy completion bash)\n  poppy completion bash > /etc/bash_completion.d/poppy"
				case "zsh":
					sh.Example = "  poppy completion zsh > \"${fpath[1]}/_poppy\""
				case "fish":
					sh.Example = "  poppy completion fish > ~/.config/fish/completions/poppy.fish"
				case "powershell":
					sh.Example = "  poppy completion powershell | Out-String | Invoke-Expression"
				}
			}
		}
	}
}

// eachCommand calls fn for c and every command below it.
func eachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		eachCommand(sub, fn)
	}
}

// unknownSubcommand is the Args of a command that only groups others
// (ops, mcp, permissions): an argument is a subcommand it doesn't have.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{err: fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return nil
}

func showHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// wrapArgs makes argument-count errors usage errors (exit code 2) that
// say in words what is wrong (argsError), not cobra's "accepts 2 arg(s),
// received 1".
func wrapArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	if v == nil {
		return nil
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			var ue usageError
			if errors.As(err, &ue) {
				return err
			}
			return usageError{err: argsError(cmd, args, err)}
		}
		return nil
	}
}

// argsError says what is wrong with the arguments of cmd, reading the
// arguments it takes from its Use line ("confirm DOMAIN ID", "call DOMAIN
// TOOL [JSON]", "mcp-server [DOMAIN...]"): which are missing, or which
// were not expected. err, cobra's own, is the answer when the Use line
// says nothing (a command that groups others).
func argsError(cmd *cobra.Command, args []string, err error) error {
	required, optional, variadic := useArgs(cmd.Use)
	usage := "usage: " + cmd.CommandPath()
	if u := strings.TrimPrefix(cmd.Use, cmd.Name()); strings.TrimSpace(u) != "" {
		usage += u
	}
	switch {
	case len(args) < len(required):
		missing := required[len(args):]
		verb := "is"
		if len(missing) > 1 {
			verb = "are"
		}
		return fmt.Errorf("%s: %s %s missing (%s)", cmd.CommandPath(), joinAnd(missing), verb, usage)
	case !variadic && len(args) > len(required)+len(optional):
		extra := args[len(required)+len(optional):]
		if len(required)+len(optional) == 0 {
			return fmt.Errorf("%s takes no arguments, and was given %s (%s)", cmd.CommandPath(), quoteArgs(extra), usage)
		}
		noun := "argument"
		if len(extra) > 1 {
			noun = "arguments"
		}
		return fmt.Errorf("%s: unexpected %s %s (%s)", cmd.CommandPath(), noun, quoteArgs(extra), usage)
	}
	return err
}

// useArgs reads the positional arguments of a Use line: required ones
// (DOMAIN), optional ones ([JSON]), and whether the last repeats
// (DOMAIN..., [DOMAIN...]). Flags written in it (--action ACTION,
// [--eq PATH=JSON]...) are skipped.
func useArgs(use string) (required, optional []string, variadic bool) {
	words := strings.Fields(use)
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case strings.HasPrefix(w, "[-"):
			for i < len(words) && !strings.Contains(words[i], "]") {
				i++
			}
		case strings.HasPrefix(w, "-"):
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "[") && !strings.HasPrefix(words[i+1], "-") {
				i++ // the flag's value
			}
		case strings.HasPrefix(w, "["):
			name := strings.Trim(w, "[].")
			variadic = variadic || strings.HasSuffix(w, "...") || strings.HasSuffix(w, "...]")
			if name != "" && name != "flags" {
				optional = append(optional, name)
			}
		default:
			variadic = variadic || strings.HasSuffix(w, "...")
			required = append(required, strings.TrimSuffix(w, "..."))
		}
	}
	return required, optional, variadic
}

// joinAnd joins names as a sentence does: "A", "A and B", "A, B and C".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// quoteArgs quotes arguments the User typed, for an error message.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, " ")
}

// plainBoolFlags makes the boolean flags of fs show in help as gh's and
// kubectl's do, "--json", not "--json[=true|false]" (pflag's way for a
// value with IsBoolFlag): the value is wrapped in one without that
// method. The flag still takes no argument (NoOptDefVal "true") and still
// accepts --json=false.
func plainBoolFlags(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && f.Value.Type() == "bool" {
			f.Value = plainBool{f.Value}
			f.NoOptDefVal = "true"
		}
	})
}

// plainBool is a boolean flag's value without IsBoolFlag (plainBoolFlags).
type plainBool struct{ pflag.Value }

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
		return usageError{err: errors.New("--profile is empty")}
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
	s, closer, err := openStore(a.statePath, a.useKeyring, a.warn)
	if err != nil {
		return nil, err
	}
	a.store, a.closer = s, closer
	return s, nil
}

// warn prints a warning on stderr, before or after setup.
func (a *app) warn(msg string) {
	if a.out == nil {
		a.out = newOutput(a.stdout, a.stderr, a.jsonOut, a.env.getenv)
	}
	a.out.warn(msg)
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
	agent, err := poppy.NewAgent(id, a.agentOptions(store))
	if err != nil {
		return nil, err
	}
	a.agent, a.cfg = agent, cfg
	return agent, nil
}

func (a *app) agentOptions(store keystore.Store) *poppy.AgentOptions {
	return &poppy.AgentOptions{
		Store:                   store,
		Logger:                  a.log,
		UnsafeAllowLoopbackHTTP: a.allowLoopback,
		HTTPClient:              a.env.httpClient,
		Clock:                   a.env.clock,
	}
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

// session resolves domain and starts or resumes the profile's Session.
func (a *app) session(ctx context.Context, domain string) (*poppy.Company, *poppy.Session, error) {
	c, err := a.company(ctx, domain)
	if err != nil {
		return nil, nil, err
	}
	s, err := c.Session(ctx, a.profile, nil)
	if err != nil {
		return nil, nil, err
	}
	return c, s, nil
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
