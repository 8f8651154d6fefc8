package poppy

// Mediated Sign-In's steps (spec 4.7), beside the Session they sign in.
// Package signin asks the User for the credentials and the one-time code
// and runs the sign-in with them.
//
// Credentials go to auth.mediated.endpoint and nowhere else (PA-4.7-05,
// PA-4.7-06): the request is built for that exact URL, is never
// redirected, and the Session transport refuses any host that is not the
// Company's. Exactly the fields the Company lists are sent, each under its
// name (PA-4.7-01). A one-time code goes alone to {endpoint}/{sign_in_id}
// (PA-4.7-08), with a token of the Session that sent the credentials and
// of no other (PA-4.7-09). No request body is ever logged, and the
// credentials appear in no error. The "complete" answer is adopted as a
// sign-in's token response: its Account Token is stored before its Session
// Token is used (PA-4.7-07).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/poppyproto/poppy/internal/bounded"
)

// MediatedStep is where a Mediated Sign-In stands: the Company's answer to
// the credentials or to a one-time code (spec 4.7).
type MediatedStep struct {
	// Status is the Company's: "complete" (the Session is signed in, see
	// Result; PA-4.7-07), "code_required" (the Company sent the User a
	// one-time code: pass it to SendMediatedCode; PA-4.7-08), "failed"
	// (PA-4.7-11) or "expired" (PA-4.7-12).
	Status string
	// Result is the sign-in's result when Status is "complete".
	Result *SignInResult
	// SentTo says how the Company sent the code, such as "Text to the
	// phone number ending in 71": the Company's text made one safe line
	// of at most 200 bytes (no control characters, nothing that could
	// reorder or hide text).
	SentTo string
	// Expires is when the code expires; zero when the Company gave none.
	Expires time.Time

	sess     *Session
	endpoint string // auth.mediated.endpoint, checked
	signInID string
	owner    string // the Session that sent the credentials
	opts     SignInOptions
}

// mediatedAnswer is the Mediated Sign-In endpoint's answer.
type mediatedAnswer struct {
	Status   string `json:"status"`
	SignInID string `json:"sign_in_id"`
	Code     struct {
		SentTo string `json:"sent_to"`
	} `json:"code"`
	ExpiresAt string `json:"expires_at"`
	Error     string `json:"error"`
}

// maxMediatedAnswer bounds an answer of the Mediated Sign-In endpoint.
const maxMediatedAnswer = 1 << 20

// SendMediatedCredentials sends the credentials the User gave, field name
// to value, to the Company's auth.mediated.endpoint for a sign-in for
// opts.Scopes (spec 4.7, PA-4.7-02): exactly the fields poppy.json lists,
// each under its name (PA-4.7-01; one missing is an error, others are not
// sent), through the Session transport, never redirected (PA-4.7-06). It
// returns the Company's answer; an answer with an error code is an *Error
// . The credentials are never logged nor put in an error.
func (s *Session) SendMediatedCredentials(ctx context.Context, credentials map[string]string, opts *SignInOptions) (*MediatedStep, error) {
	if s == nil {
		return nil, ErrNoSession
	}
	if opts == nil || len(opts.Scopes) == 0 {
		return nil, configError("SendMediatedCredentials: no scopes")
	}
	var m *MediatedSignIn
	if s.company.doc.Auth != nil {
		m = s.company.doc.Auth.Mediated
	}
	if m == nil {
		return nil, fmt.Errorf("%w: the Company offers no Mediated Sign-In", ErrNoAuth)
	}
	u, err := s.agent.ParseURL(m.Endpoint) // http:// on loopback only with UnsafeAllowLoopbackHTTP
	if err != nil || u.RawQuery != "" {
		return nil, errors.New("poppy: auth.mediated.endpoint is not an HTTPS URL")
	}
	sent := make(map[string]string, len(m.Fields))
	for _, f := range m.Fields {
		v, ok := credentials[f.Name]
		if !ok {
			return nil, fmt.Errorf("poppy: the credentials lack the field %q (%s)", cleanText(f.Name), cleanText(f.Label))
		}
		sent[f.Name] = v
	}
	body, err := json.Marshal(struct {
		Scope       string            `json:"scope"`
		Credentials map[string]string `json:"credentials"`
	}{strings.Join(opts.Scopes, " "), sent})
	if err != nil {
		return nil, fmt.Errorf("poppy: encoding the credentials: %w", err)
	}
	// A credential exchange (token.go): a "complete" answer carries the
	// Account Token, kept even if ctx ends first.
	return settle(ctx, func(ctx context.Context) (*MediatedStep, error) {
		status, answer, err := postMediated(ctx, s.directHTTPClient(), u.String(), body) // PA-4.7-02
		if err != nil {
			return nil, err
		}
		// The sign-in belongs to the Session that sent the credentials (the
		// transport may have replaced an ended Session before they were
		// accepted); its one-time code goes with that Session's token only.
		st := &MediatedStep{sess: s, endpoint: u.String(), owner: s.ID(), opts: *opts}
		return s.mediatedStep(ctx, st, status, answer)
	})
}

// SendMediatedCode sends the one-time code the User gave for step, a
// "code_required" answer, alone to {endpoint}/{sign_in_id} (PA-4.7-08,
// PA-4.7-09), with a token of the Session that sent the credentials and
// of no other, and returns the Company's answer: "complete", or
// "code_required" again for a wrong code (PA-4.7-10), "failed" or
// "expired". If the Company ended that Session meanwhile (PA-4.2-16), the
// sign-in ended with it: the error matches ErrInvalidSession, and the code
// was not sent with another Session's token.
func (s *Session) SendMediatedCode(ctx context.Context, step *MediatedStep, code string) (*MediatedStep, error) {
	if s == nil {
		return nil, ErrNoSession
	}
	if step == nil || step.sess != s || step.Status != "code_required" {
		return nil, configError("SendMediatedCode: not a code_required step of this Session")
	}
	cb, _ := json.Marshal(map[string]string{"code": code})
	target := strings.TrimSuffix(step.endpoint, "/") + "/" + url.PathEscape(step.signInID)
	// A credential exchange (token.go), as SendMediatedCredentials.
	return settle(ctx, func(ctx context.Context) (*MediatedStep, error) {
		status, answer, err := postMediated(ctx, s.boundHTTPClient(step.owner), target, cb)
		if s.ID() != step.owner {
			// The Company ended the Session while the User typed the code.
			if err == nil {
				_, err = readMediated(status, answer)
			}
			if err == nil || !errors.Is(err, ErrInvalidSession) {
				err = joinErr(fmt.Errorf("%w: the Company ended the Session during the sign-in", ErrInvalidSession), err)
			}
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		next := &MediatedStep{sess: s, endpoint: step.endpoint, owner: step.owner, opts: step.opts}
		return s.mediatedStep(ctx, next, status, answer)
	})
}

// joinErr is first, wrapping also when there is one.
func joinErr(first, also error) error {
	if also == nil {
		return first
	}
	return fmt.Errorf("%w: %w", first, also)
}

// mediatedStep reads an answer into st, signing the Session in when it is
// complete.
func (s *Session) mediatedStep(ctx context.Context, st *MediatedStep, status int, answer []byte) (*MediatedStep, error) {
	mr, err := readMediated(status, answer)
	if err != nil {
		return nil, err
	}
	st.Status = mr.Status
	switch mr.Status {
	case "complete": // PA-4.7-07
		res, err := s.acceptSignIn(ctx, answer, &st.opts)
		if err != nil {
			return nil, err
		}
		st.Result = res
	case "failed", "expired": // PA-4.7-11, PA-4.7-12
	case "code_required": // PA-4.7-08, PA-4.7-10
		if mr.SignInID == "" || strings.ContainsAny(mr.SignInID, "/?#%") {
			return nil, errors.New("poppy: mediated sign-in: code_required without a usable sign_in_id")
		}
		st.signInID = mr.SignInID
		st.SentTo = cleanText(mr.Code.SentTo)
		if mr.ExpiresAt != "" {
			st.Expires, _ = time.Parse(time.RFC3339, mr.ExpiresAt)
		}
	default:
		return nil, fmt.Errorf("poppy: unknown mediated sign-in status %q", cleanText(mr.Status))
	}
	return st, nil
}

// postMediated POSTs body to target with client, never redirected, so
// that the credentials reach that URL only (PA-4.7-06), and returns the
// answer's status and body, bounded.
func postMediated(ctx context.Context, client *http.Client, target string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("poppy: mediated sign-in: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// The URL holds no secret, but the cause is what matters.
		return 0, nil, fmt.Errorf("poppy: mediated sign-in: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := bounded.ReadAll(resp.Body, maxMediatedAnswer)
	if errors.Is(err, ErrResponseTooLarge) {
		return 0, nil, err
	}
	if err != nil {
		return 0, nil, fmt.Errorf("poppy: mediated sign-in: reading the answer: %w", err)
	}
	return resp.StatusCode, b, nil
}

// readMediated decodes an answer; a status-less answer is an OAuth-style
// error whatever its HTTP status.
func readMediated(status int, b []byte) (*mediatedAnswer, error) {
	var mr mediatedAnswer
	if err := json.Unmarshal(b, &mr); err != nil {
		return nil, fmt.Errorf("poppy: mediated sign-in answered HTTP %d without JSON", status)
	}
	if mr.Status != "" && status < 300 || mr.Status == "failed" || mr.Status == "expired" || mr.Status == "code_required" {
		return &mr, nil
	}
	code := cleanText(mr.Error)
	if code == "" {
		code = "error"
	}
	return nil, &Error{Endpoint: "auth.mediated.endpoint", Status: status, Code: code}
}
