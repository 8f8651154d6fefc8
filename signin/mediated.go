package signin

// Mediated Sign-In (spec 4.7).
//
// Credentials go to auth.mediated.endpoint and nowhere else (PA-4.7-05,
// PA-4.7-06): the request is built for that exact URL, and the Session
// transport refuses any host that is not the Company's. A one-time code goes
// alone to {endpoint}/{sign_in_id} (PA-4.7-09). Credentials marked secret
// never appear in a log record, an error, or formatted output: Credentials
// redacts them, and no request body is ever logged.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/companytext"
	"github.com/poppyproto/poppy/internal/sdk"
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

// mediatedResponse is the Mediated Sign-In endpoint's answer.
type mediatedResponse struct {
	Status   string `json:"status"`
	SignInID string `json:"sign_in_id"`
	Code     struct {
		SentTo string `json:"sent_to"`
	} `json:"code"`
	ExpiresAt string `json:"expires_at"`
	Error     string `json:"error"`
}

// Mediated signs the Session in with credentials the User gives through p
// (spec 4.7), asking for a one-time code when the Company sends one. A
// stored Account Token that covers the scopes is used instead, without
// asking the User.
func Mediated(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions, p UserPrompter) (*poppy.SignInResult, error) {
	if res, err := prepare(ctx, sess, "mediated", opts); res != nil || err != nil {
		return res, err
	}
	c := sess.Company()
	m := c.Document().Auth.Mediated
	endpoint, err := c.Agent().ParseURL(m.Endpoint) // http:// on loopback only with UnsafeAllowLoopbackHTTP
	if err != nil || endpoint.RawQuery != "" {
		return nil, errors.New("signin: auth.mediated.endpoint is not an HTTPS URL")
	}
	prompt := &CredentialsPrompt{Company: c.Name(), Fields: append([]poppy.MediatedField(nil), m.Fields...), Scopes: describe(c, opts.Scopes)}
	creds, err := p.Credentials(ctx, prompt)
	if err != nil {
		return nil, err
	}
	if creds == nil {
		return nil, errors.New("signin: no credentials")
	}
	// PA-4.7-01: exactly the listed fields, each under its name.
	sent := map[string]string{}
	for _, f := range m.Fields {
		v, ok := creds.values[f.Name]
		if !ok {
			return nil, fmt.Errorf("signin: credentials lack the field %q (%s)", f.Name, f.Label)
		}
		sent[f.Name] = v
	}
	body, err := json.Marshal(struct {
		Scope       string            `json:"scope"`
		Credentials map[string]string `json:"credentials"`
	}{scopeString(opts.Scopes), sent})
	if err != nil {
		return nil, err
	}
	// PA-4.7-02
	status, answer, err := postJSON(ctx, sess, endpoint.String(), body)
	if err != nil {
		return nil, err
	}
	// The sign-in belongs to the Session that sent the credentials (the
	// transport may have replaced an ended Session before they were
	// accepted); its one-time code goes with that Session's token only.
	owner := sess.ID()
	retry := false
	for {
		mr, err := readMediated(status, answer)
		if err != nil {
			return nil, err
		}
		switch mr.Status {
		case "complete": // PA-4.7-07
			return sdk.AcceptSignIn(ctx, sess, answer, opts)
		case "failed": // PA-4.7-11
			return nil, ErrSignInFailed
		case "expired": // PA-4.7-12
			return nil, ErrSignInExpired
		case "code_required": // PA-4.7-08, PA-4.7-10
			if mr.SignInID == "" || strings.ContainsAny(mr.SignInID, "/?#%") {
				return nil, errors.New("signin: code_required without a usable sign_in_id")
			}
			var exp time.Time
			if mr.ExpiresAt != "" {
				exp, _ = time.Parse(time.RFC3339, mr.ExpiresAt)
			}
			code, err := p.OneTimeCode(ctx, &OneTimeCodePrompt{Company: c.Name(), SentTo: companyText(mr.Code.SentTo), Expires: exp, Retry: retry})
			if err != nil {
				return nil, err
			}
			retry = true
			// PA-4.7-09: only the code, with a token of the same Session.
			cb, _ := json.Marshal(map[string]string{"code": code})
			status, answer, err = postCode(ctx, sess, owner, strings.TrimSuffix(endpoint.String(), "/")+"/"+url.PathEscape(mr.SignInID), cb)
			if err == nil && sess.ID() != owner {
				// The Company ended the Session while the User typed the
				// code: the sign-in ended with it (PA-4.2-16, PA-4.7-09).
				_, err = readMediated(status, answer)
			}
			if sess.ID() != owner || errors.Is(err, poppy.ErrInvalidSession) {
				return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
			}
			if err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("signin: unknown mediated sign-in status %q", mr.Status)
		}
	}
}

const maxAnswer = 1 << 20

func postJSON(ctx context.Context, sess *poppy.Session, target string, body []byte) (int, []byte, error) {
	return post(ctx, sdk.DirectHTTPClient(sess), target, body)
}

// postCode posts a one-time code with a token of the Session owner only.
func postCode(ctx context.Context, sess *poppy.Session, owner, target string, body []byte) (int, []byte, error) {
	return post(ctx, sdk.BoundHTTPClient(sess, owner), target, body)
}

func post(ctx context.Context, client *http.Client, target string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	// PA-4.7-06: never redirected, so the credentials reach this URL only.
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL holds no secret, but the cause is what matters
		}
		return 0, nil, fmt.Errorf("signin: mediated sign-in: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return 0, nil, fmt.Errorf("signin: mediated sign-in: reading answer: %w", err)
	}
	if len(b) > maxAnswer {
		return 0, nil, poppy.ErrResponseTooLarge
	}
	return resp.StatusCode, b, nil
}

// readMediated decodes an answer; a status-less answer is an OAuth-style
// error.
func readMediated(status int, b []byte) (*mediatedResponse, error) {
	var mr mediatedResponse
	if err := json.Unmarshal(b, &mr); err != nil {
		return nil, fmt.Errorf("signin: mediated sign-in answered HTTP %d without JSON", status)
	}
	if mr.Status != "" && status < 300 || mr.Status == "failed" || mr.Status == "expired" || mr.Status == "code_required" {
		return &mr, nil
	}
	code := companyText(mr.Error)
	if code == "" {
		code = "error"
	}
	return nil, &poppy.Error{Endpoint: "auth.mediated.endpoint", Status: status, Code: code}
}

// maxCompanyText bounds a Company's text that reaches the User or an error.
const maxCompanyText = 200

// companyText returns a Company's text fit to show on one line, with
// nothing that could drive a terminal or reorder or hide text
// (internal/companytext), cut to maxCompanyText bytes.
func companyText(s string) string { return companytext.Line(s, maxCompanyText) }
