package signin

// A UserPrompter for programs that run in a terminal: scripts and the poppy
// command. Everything that comes from the Company (its name, scope
// descriptions, field labels, user codes, where a code was sent) is printed
// with control characters escaped, so a Company can't move the cursor,
// retitle the terminal or hide text. Secret fields are read without echo
// when the input is a terminal.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/poppyproto/poppy/internal/termtext"
)

// maxAnswerLine bounds one line the User types.
const maxAnswerLine = 4096

// errNoAnswer is the error of a Terminal when its input ends before the User
// answered.
var errNoAnswer = errors.New("signin: no answer: the input ended")

// Terminal is a UserPrompter that writes to a terminal and reads the User's
// answers from it. Make one with TerminalPrompter.
type Terminal struct {
	out io.Writer
	in  io.Reader
	// fd is the input's file descriptor when it is a terminal, else -1.
	fd int
}

// TerminalPrompter returns a UserPrompter that shows links and codes on out
// and reads credentials and one-time codes, one line each, from in, usually
// signin.TerminalPrompter(os.Stdout, os.Stdin). When in is a terminal (an
// *os.File, or a reader over one whose Fd method names it, such as a
// reader that a signal can interrupt), secret fields are read without echo.
// Text from the Company is printed with control characters escaped.
func TerminalPrompter(out io.Writer, in io.Reader) *Terminal {
	t := &Terminal{out: out, in: in, fd: -1}
	if f, ok := in.(interface{ Fd() uintptr }); ok && int(f.Fd()) >= 0 && termtext.IsTerminal(f.Fd()) {
		t.fd = int(f.Fd())
	}
	return t
}

func (t *Terminal) printf(format string, args ...any) { _, _ = fmt.Fprintf(t.out, format, args...) }

func (t *Terminal) scopes(scopes []Scope) {
	for _, s := range scopes {
		if s.Description != "" {
			t.printf("  - %s: %s\n", termtext.Escape(s.Name), termtext.Escape(s.Description))
		} else {
			t.printf("  - %s\n", termtext.Escape(s.Name))
		}
	}
}

// OpenURL prints the authorization URL for the User to open.
func (t *Terminal) OpenURL(_ context.Context, p *URLPrompt) error {
	t.printf("To sign in to %s, open this link in your browser:\n\n  %s\n\n", termtext.Escape(p.Company), termtext.Escape(p.URL))
	if len(p.Scopes) > 0 {
		t.printf("It asks for:\n")
		t.scopes(p.Scopes)
	}
	return nil
}

// ShowCode prints the verification link and the user code.
func (t *Terminal) ShowCode(_ context.Context, p *CodePrompt) error {
	t.printf("To sign in to %s, open %s and enter the code\n\n  %s\n\n", termtext.Escape(p.Company), termtext.Escape(p.VerificationURI), termtext.Escape(p.UserCode))
	if p.VerificationURIComplete != "" {
		t.printf("or open %s\n", termtext.Escape(p.VerificationURIComplete))
	}
	if !p.Expires.IsZero() {
		t.printf("The code expires at %s.\n", p.Expires.Local().Format(time.Kitchen))
	}
	if len(p.Scopes) > 0 {
		t.printf("It asks for:\n")
		t.scopes(p.Scopes)
	}
	return nil
}

// Credentials asks for each field the Company declared, in its order, and
// for nothing else; secret fields are read without echo on a terminal.
func (t *Terminal) Credentials(ctx context.Context, p *CredentialsPrompt) (*Credentials, error) {
	t.printf("Sign in to %s.\n", termtext.Escape(p.Company))
	if len(p.Scopes) > 0 {
		t.printf("This asks for:\n")
		t.scopes(p.Scopes)
	}
	values := make(map[string]string, len(p.Fields))
	for _, f := range p.Fields {
		label := f.Label
		if label == "" {
			label = f.Name
		}
		var v string
		var err error
		if f.Secret && t.fd >= 0 {
			v, err = t.readSecret(ctx, termtext.Escape(label)+": ")
		} else {
			t.printf("%s: ", termtext.Escape(label))
			v, err = t.read(ctx)
		}
		if err != nil {
			return nil, err
		}
		values[f.Name] = v
	}
	return NewCredentials(p, values), nil
}

// OneTimeCode asks for the code the Company sent the User.
func (t *Terminal) OneTimeCode(ctx context.Context, p *OneTimeCodePrompt) (string, error) {
	if p.Retry {
		t.printf("That code was not accepted.\n")
	}
	if p.SentTo != "" {
		t.printf("%s sent you a code (%s).\n", termtext.Escape(p.Company), termtext.Escape(p.SentTo))
	} else {
		t.printf("%s sent you a code.\n", termtext.Escape(p.Company))
	}
	t.printf("Code: ")
	return t.read(ctx)
}

// readSecret prints prompt and reads one line from the terminal without
// echo. Echo goes off before the prompt is printed, so an answer typed
// ahead of it is hidden too.
func (t *Terminal) readSecret(ctx context.Context, prompt string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	restore, ok := termtext.EchoOff(uintptr(t.fd))
	if !ok {
		// A terminal whose echo can't be switched off: the secret is
		// not read, rather than shown as it is typed.
		return "", errors.New("signin: the terminal's echo can't be switched off to read a secret")
	}
	t.printf("%s", prompt)
	v, err := t.readLine()
	restore()
	t.printf("\n")
	if err != nil {
		return "", err
	}
	return v, nil
}

// read reads one line, byte by byte, so nothing after the line is
// consumed. A secret from a terminal goes through readSecret instead.
func (t *Terminal) read(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return t.readLine()
}

// readLine reads one line (termtext.ReadLine), so nothing after it is
// consumed.
func (t *Terminal) readLine() (string, error) {
	v, err := termtext.ReadLine(t.in, maxAnswerLine)
	switch {
	case errors.Is(err, io.EOF):
		return "", errNoAnswer
	case errors.Is(err, termtext.ErrLineTooLong):
		return "", errors.New("signin: the answer is too long")
	case err != nil:
		return "", fmt.Errorf("signin: reading the answer: %w", err)
	}
	return v, nil
}
