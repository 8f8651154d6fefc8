package main

// poppy signin: sign the User in to their account (spec 4.4 to 4.7).
//
// Device: the code, the link and a QR code of verification_uri_complete,
// then a live countdown on a terminal while the SDK polls. Direct: the
// authorization URL, opened in the system browser ($BROWSER, else the
// platform's opener) unless --no-open; the callback reaches "poppy
// serve-identity", which may run in another process: the pending sign-in is
// in the keystore, and this process waits for its outcome there. Mediated:
// exactly the fields the Company declares, secrets read without echo.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mdp/qrterminal/v3"
	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/signin"
)

// methodPreference is the order in which signin picks a type when
// --method is not given: device needs nothing but a second screen, direct
// needs serve-identity running, mediated hands the agent a password.
var methodPreference = []string{"device", "direct", "mediated"}

type signedInJSON struct {
	Event     string   `json:"event"`
	Domain    string   `json:"domain"`
	Method    string   `json:"method"`
	Account   string   `json:"account"`
	SessionID string   `json:"session_id"`
	Requested []string `json:"requested"`
	Granted   []string `json:"granted"`
	Missing   []string `json:"missing"`
	Reused    bool     `json:"reused"`
}

type signInOptions struct {
	app     *app
	Domain  string
	Method  string
	Scopes  []string
	Account string
	NoOpen  bool
}

func newCmdSignIn(a *app, runF func(context.Context, *signInOptions) error) *cobra.Command {
	opts := &signInOptions{app: a}
	cmd := &cobra.Command{
		Use:   "signin DOMAIN",
		Short: "Sign in to your account at a Company (direct, device or mediated)",
		Long: `signin signs you in to your account at the Company for --scope (default
poppy:read), or does nothing when a stored sign-in covers them.
  --method device    shows a code, a link and a QR code; approve on any device
  --method direct    opens the Company's page in your browser (--no-open prints
                     the link); needs "poppy serve-identity" running, able to
                     reach the Company: it exchanges the code there itself
  --method mediated  asks for exactly the credentials the Company declares
Without --method, the first the Company offers for the scopes of device,
direct, mediated. With --json it prints JSON Lines: a "device_code" or
"authorization_url" event, then "signed_in". Ctrl-C stops waiting (exit 130).`,
		Example: `  poppy signin example.com
  poppy signin example.com --method device --scope poppy:read --scope poppy:write
  poppy signin example.com --method direct --no-open
  poppy --json signin example.com --method mediated < credentials.txt`,
		GroupID:           "company",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if opts.Method != "" && !slices.Contains(methodPreference, opts.Method) {
				return usageError{err: fmt.Errorf("--method must be direct, device or mediated, not %q", opts.Method)}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSignIn(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Method, "method", "", "direct, device or mediated (default: the first offered of device, direct, mediated)")
	cmd.Flags().StringArrayVar(&opts.Scopes, "scope", nil, "a scope to sign in for (repeatable; default poppy:read)")
	cmd.Flags().StringVar(&opts.Account, "account", "", `a label for the account, for several accounts at one Company (default "default")`)
	cmd.Flags().BoolVar(&opts.NoOpen, "no-open", false, "direct: print the link instead of opening the browser")
	_ = cmd.RegisterFlagCompletionFunc("method", cobra.FixedCompletions([]string{"device", "direct", "mediated"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runSignIn(ctx context.Context, opts *signInOptions) error {
	a := opts.app
	domain, method, scopes := opts.Domain, opts.Method, opts.Scopes
	if len(scopes) == 0 {
		scopes = []string{"poppy:read"}
	}
	c, err := a.company(ctx, domain)
	if err != nil {
		return err
	}
	s, err := c.Session(ctx, a.profile, nil)
	if err != nil {
		return err
	}
	sopts := &poppy.SignInOptions{Scopes: scopes, Account: opts.Account}
	// A stored sign-in that covers the scopes is used whatever the
	// method (spec 4.4, 4.8).
	if res, ok, err := s.UseAccountToken(ctx, sopts); err != nil {
		return err
	} else if ok {
		return a.reportSignIn(c, method, res)
	}
	eligible := c.EligibleSignInTypes(scopes)
	if method == "" {
		for _, m := range methodPreference {
			if slices.Contains(eligible, m) {
				method = m
				break
			}
		}
	}
	if method != "" && !slices.Contains(eligible, method) && len(eligible) > 0 {
		// Another method would do: exit 3 with the exact command to run,
		// as for any refusal that needs a sign-in (signInHint).
		msg := fmt.Sprintf("poppy: %s does not offer %s sign-in for %s; it offers: %s", c.Name(), method, strings.Join(scopes, " "), strings.Join(eligible, ", "))
		return a.signInHint(errors.New(msg), c, domain, scopes)
	}
	if method == "" || !slices.Contains(eligible, method) {
		msg := fmt.Sprintf("poppy: %s offers no sign-in for %s", c.Name(), strings.Join(scopes, " "))
		if method != "" {
			msg = fmt.Sprintf("poppy: %s does not offer %s sign-in for %s", c.Name(), method, strings.Join(scopes, " "))
		}
		return &hintError{err: errors.New(msg), hint: "run: " + a.cmdline("discover", shellQuote(domain)) + " to see what it offers", code: exitError}
	}
	p := &cliPrompter{a: a, Terminal: signin.TerminalPrompter(a.out.prompt(), a.in), noOpen: opts.NoOpen}
	defer p.stopCountdown()
	var res *poppy.SignInResult
	switch method {
	case "device":
		res, err = signin.Device(ctx, s, sopts, p)
	case "mediated":
		res, err = signin.Mediated(ctx, s, sopts, p)
	case "direct":
		a.checkIdentityServed(ctx)
		var d *signin.Direct
		if d, err = signin.NewDirect(a.agent, nil); err == nil {
			res, err = d.SignIn(ctx, s, sopts, p)
		}
	}
	p.stopCountdown()
	if err != nil {
		return a.signInError(err, c, method)
	}
	return a.reportSignIn(c, method, res)
}

// signInError says what a failed sign-in means for the User.
func (a *app) signInError(err error, c *poppy.Company, method string) error {
	switch {
	case errors.Is(err, signin.ErrAccessDenied):
		return &hintError{err: fmt.Errorf("poppy: you declined the sign-in at %s: %w", c.Name(), err), code: exitDeclined}
	case method == "direct" && errors.Is(err, signin.ErrSignInFailed):
		// The callback reached serve-identity, which exchanges the code
		// at the Company itself (signin.Direct.Complete) and could not.
		return &hintError{code: exitError,
			err: fmt.Errorf("poppy: poppy serve-identity received the Company's redirect but could not exchange the code at %s: %w", c.Name(), err),
			hint: "serve-identity exchanges the code itself, so it must reach the Company as this command does: " +
				"run it with the same network settings (HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE, DNS) and keystore, then sign in again"}
	}
	return err
}

// reportSignIn prints how a sign-in ended.
func (a *app) reportSignIn(c *poppy.Company, method string, res *poppy.SignInResult) error {
	j := signedInJSON{Event: "signed_in", Domain: c.Domain(), Method: method, Account: res.Account, SessionID: res.SessionID,
		Requested: nonNil(res.Requested), Granted: nonNil(res.Granted), Missing: nonNil(res.Missing()), Reused: res.Reused}
	if j.Account == "" {
		j.Account = poppy.DefaultAccount
	}
	a.out.emit(j)
	o := a.out
	how := ""
	if res.Reused {
		how = " (with the sign-in kept in the keystore)"
	}
	o.printf("%s to %s%s, account %s, scopes %s.\n", o.green("Signed in"), esc(c.Name()), how, esc(j.Account), orNone(escJoin(j.Granted)))
	if len(j.Missing) > 0 {
		o.printf("You did not grant %s; tasks that need them will ask again.\n", escJoin(j.Missing))
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// cliPrompter is the Terminal prompter with what a person at a terminal
// gets on top: a QR code and a countdown for Device Sign-In, the browser
// for Direct Sign-In, JSON events with --json.
type cliPrompter struct {
	*signin.Terminal
	a      *app
	noOpen bool

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// maxQRText bounds what is drawn as a QR code: a Company's long URL would
// fill the screen.
const maxQRText = 512

func (p *cliPrompter) ShowCode(ctx context.Context, cp *signin.CodePrompt) error {
	o := p.a.out
	if o.json {
		o.emit(map[string]any{"event": "device_code", "user_code": cp.UserCode, "verification_uri": cp.VerificationURI,
			"verification_uri_complete": cp.VerificationURIComplete, "expires_at": cp.Expires.UTC().Truncate(time.Second)})
	}
	w := o.prompt()
	if err := p.Terminal.ShowCode(ctx, cp); err != nil {
		return err
	}
	link := cp.VerificationURIComplete
	if link == "" {
		link = cp.VerificationURI
	}
	if u, err := url.Parse(link); err == nil && u.Scheme == "https" && len(link) <= maxQRText && !o.json {
		fmt.Fprintf(w, "\nOr scan this with your phone:\n")
		qrterminal.GenerateWithConfig(link, qrterminal.Config{Level: qrterminal.L, Writer: w, HalfBlocks: true, QuietZone: 1})
	}
	p.startCountdown(w, cp.Expires, isTerminal(w))
	return nil
}

// startCountdown shows how long the code is valid while the SDK polls: a
// line rewritten every second on a terminal, one line otherwise.
func (p *cliPrompter) startCountdown(w io.Writer, expires time.Time, live bool) {
	if !live {
		left := time.Until(expires).Round(time.Second)
		fmt.Fprintf(w, "Waiting for you to approve (the code expires in %s)...\n", left)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	p.mu.Lock()
	p.stop, p.done = cancel, done
	p.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		spin := []string{"|", "/", "-", `\`}
		for i := 0; ; i++ {
			left := max(time.Until(expires), 0).Round(time.Second)
			fmt.Fprintf(w, "\r\x1b[K%s Waiting for you to approve... %d:%02d left (Ctrl-C to stop)", spin[i%len(spin)], int(left.Minutes()), int(left.Seconds())%60)
			select {
			case <-ctx.Done():
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
}

func (p *cliPrompter) stopCountdown() {
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (p *cliPrompter) OpenURL(ctx context.Context, up *signin.URLPrompt) error {
	o := p.a.out
	o.emit(map[string]any{"event": "authorization_url", "url": up.URL})
	if err := p.Terminal.OpenURL(ctx, up); err != nil {
		return err
	}
	w := o.prompt()
	if !p.noOpen {
		if err := openBrowser(ctx, p.a.env.getenv, up.URL); err != nil {
			fmt.Fprintf(w, "Could not open a browser (%v): open the link yourself.\n", err)
		} else {
			fmt.Fprintf(w, "Opened your browser.\n")
		}
	}
	fmt.Fprintf(w, "Waiting for the Company to send you back (poppy serve-identity receives it)...\n")
	return nil
}

// openBrowser opens u in the User's browser: $BROWSER if set, else the
// platform's opener. u goes as one argument, never through a shell.
func openBrowser(ctx context.Context, getenv func(string) string, u string) error {
	if parsed, err := url.Parse(u); err != nil || parsed.Scheme != "https" {
		return errors.New("not an https link")
	}
	var name string
	var args []string
	if b := getenv("BROWSER"); b != "" {
		name = strings.Split(b, ":")[0]
	} else {
		switch runtime.GOOS {
		case "darwin":
			name = "open"
		case "windows":
			name, args = "rundll32", []string{"url.dll,FileProtocolHandler"}
		default:
			name = "xdg-open"
		}
	}
	cmd := exec.CommandContext(ctx, name, append(args, u)...)
	cmd.Stdout, cmd.Stderr = nil, nil
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// checkIdentityServed warns when the client_id URL does not answer: the
// Company would refuse the sign-in, and the redirect would reach no one.
func (a *app) checkIdentityServed(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	id := a.agent.Identity()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id.ClientID(), nil)
	if err != nil {
		return
	}
	resp, err := a.agent.HTTPClient().Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	a.out.warn(fmt.Sprintf("warning: %s does not answer (%v): is poppy serve-identity running behind your proxy? "+
		"Direct Sign-In needs it for the Company to check the agent and to receive the redirect.", id.ClientID(), esc(err.Error())))
}
