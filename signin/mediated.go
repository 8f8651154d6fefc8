package signin

// Mediated Sign-In (spec 4.7).
//
// The protocol's steps are the root's (poppy.Session.SendMediatedCredentials
// and SendMediatedCode): credentials go to auth.mediated.endpoint and
// nowhere else (PA-4.7-05, PA-4.7-06), a one-time code alone to
// {endpoint}/{sign_in_id} (PA-4.7-09). This file asks the User for them.
// Credentials marked secret never appear in a log record, an error, or
// formatted output: Credentials redacts them, and no request body is ever
// logged.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/poppyproto/poppy"
)

// Credentials are the values a User gave for a Mediated Sign-In. Values of
// fields the Company marks secret are redacted whenever Credentials are
// formatted or logged (spec 4.7).
type Credentials struct {
	values map[string]string
	secret map[string]bool
}

// NewCredentials returns Credentials holding values, field name → value,
// for the fields of p.
func NewCredentials(p *CredentialsPrompt, values map[string]string) *Credentials {
	c := &Credentials{values: map[string]string{}, secret: map[string]bool{}}
	for k, v := range values {
		c.values[k] = v
	}
	for _, f := range p.Fields {
		if f.Secret {
			c.secret[f.Name] = true
		}
	}
	return c
}

// String lists the fields, with secret values redacted.
func (c *Credentials) String() string {
	if c == nil {
		return "signin.Credentials(nil)"
	}
	names := make([]string, 0, len(c.values))
	for k := range c.values {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("signin.Credentials{")
	for i, k := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteString(": ")
		if c.secret[k] {
			b.WriteString("[REDACTED]")
		} else {
			fmt.Fprintf(&b, "%q", c.values[k])
		}
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String.
func (c *Credentials) GoString() string { return c.String() }

// Format writes String for every verb.
func (c *Credentials) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(c.String())) }

// LogValue logs the field names only.
func (c *Credentials) LogValue() slog.Value {
	names := make([]string, 0, len(c.values))
	for k := range c.values {
		names = append(names, k)
	}
	sort.Strings(names)
	return slog.StringValue("credentials for " + strings.Join(names, ", ") + " (values redacted)")
}

// Mediated signs the Session in with credentials the User gives through p
// (spec 4.7), asking for a one-time code when the Company sends one. A
// stored Account Token that covers the scopes is used instead, without
// asking the User. The credentials go to the Company's
// auth.mediated.endpoint and nowhere else, and a one-time code with a
// token of the Session that sent them and no other
// (poppy.Session.SendMediatedCredentials, SendMediatedCode).
func Mediated(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions, p UserPrompter) (*poppy.SignInResult, error) {
	if res, err := prepare(ctx, sess, "mediated", opts); res != nil || err != nil {
		return res, err
	}
	c := sess.Company()
	m := c.Document().Auth.Mediated
	prompt := &CredentialsPrompt{Company: c.Name(), Fields: append([]poppy.MediatedField(nil), m.Fields...), Scopes: describe(c, opts.Scopes)}
	creds, err := p.Credentials(ctx, prompt)
	if err != nil {
		return nil, err
	}
	if creds == nil {
		return nil, errors.New("signin: no credentials")
	}
	step, err := sess.SendMediatedCredentials(ctx, creds.values, opts) // PA-4.7-01, PA-4.7-02
	retry := false
	for {
		if err != nil {
			return nil, err
		}
		switch step.Status {
		case "complete": // PA-4.7-07
			return step.Result, nil
		case "failed": // PA-4.7-11
			return nil, ErrSignInFailed
		case "expired": // PA-4.7-12
			return nil, ErrSignInExpired
		}
		// code_required: PA-4.7-08, PA-4.7-10
		code, perr := p.OneTimeCode(ctx, &OneTimeCodePrompt{Company: c.Name(), SentTo: step.SentTo, Expires: step.Expires, Retry: retry})
		if perr != nil {
			return nil, perr
		}
		retry = true
		// PA-4.7-09: only the code, with a token of the same Session.
		step, err = sess.SendMediatedCode(ctx, step, code)
		if errors.Is(err, poppy.ErrInvalidSession) {
			// The Company ended the Session while the User typed the
			// code: the sign-in ended with it (PA-4.2-16, PA-4.7-09).
			return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
		}
	}
}
