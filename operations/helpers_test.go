package operations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

var ctx = context.Background()

// exchangeAction is the action of the fake's exchange endpoint.
var exchangeAction = operations.OpenAPIAction("POST", "/orders/{id}/exchanges")

// env is a fake Company, an agent listing the operations extension, a
// Session signed in with poppy:read and poppy:write, and a Client whose
// Approver records what it was asked.
type env struct {
	*testenv.Env
	sess *poppy.Session
	c    *operations.Client
	ap   *recorder
}

// recorder is an Approver that records each request and answers with
// answer (Approve when nil).
type recorder struct {
	mu      sync.Mutex
	reqs    []*operations.ApprovalRequest
	confirm []int // confirm requests logged when each request came
	answer  func(*operations.ApprovalRequest) operations.Decision
	e       *env
}

func (r *recorder) Approve(_ context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	if r.e != nil {
		r.confirm = append(r.confirm, len(r.e.confirms()))
	}
	if r.answer != nil {
		return r.answer(req), nil
	}
	return operations.Approve, nil
}

func (r *recorder) asked() []*operations.ApprovalRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*operations.ApprovalRequest(nil), r.reqs...)
}

func newEnv(t *testing.T, opts *poppytest.Options, copts *operations.Options) *env {
	t.Helper()
	te := testenv.NewWithExtensions(t, poppytest.NewServer(t, opts), map[string]string{"operations": "1"}, nil)
	e := &env{Env: te, ap: &recorder{}}
	e.ap.e = e
	e.sess = te.Session("local-user")
	signIn(t, e.Env, e.sess)
	var o operations.Options
	if copts != nil {
		o = *copts
	}
	if o.Approver == nil {
		o.Approver = e.ap
	}
	c, err := operations.New(e.sess, &o)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	return e
}

// signIn signs sess in with Device Sign-In, the fake's User approving.
func signIn(t testing.TB, e *testenv.Env, sess *poppy.Session) {
	t.Helper()
	p := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := e.Srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	if _, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, p); err != nil {
		t.Fatal(err)
	}
}

// exchangeRequest is the spec's exchange request (OPS 4.1).
func (e *env) exchangeRequest(item string) *http.Request {
	body := `{"item_id":"` + item + `","replacement_sku":"stormline-insulated-m"}`
	req, err := http.NewRequest("POST", e.Srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// propose proposes the jacket exchange and returns the operation.
func (e *env) propose(item string) *operations.Operation {
	e.T.Helper()
	op, err := e.tryPropose(ctx, item)
	if err != nil {
		e.T.Fatal(err)
	}
	return op
}

// tryPropose is propose for a goroutine other than the test's, which must
// not call Fatal: an answer without an operation is an error.
func (e *env) tryPropose(ctx context.Context, item string) (*operations.Operation, error) {
	op, resp, err := e.c.Propose(ctx, e.exchangeRequest(item), exchangeAction, nil)
	if err != nil {
		return nil, err
	}
	if op == nil {
		resp.Body.Close()
		return nil, fmt.Errorf("no operation: HTTP %d", resp.StatusCode)
	}
	return op, nil
}

// opRequests returns the SDK's requests to the operations endpoint whose
// path ends with suffix ("/confirm", "/cancel", "" for reads).
func (e *env) opRequests(suffix string) []poppytest.Request {
	var out []poppytest.Request
	for _, r := range e.Requests(poppytest.EndpointOperations) {
		switch {
		case suffix == "" && r.Method == "GET":
			out = append(out, r)
		case suffix != "" && r.Method == "POST" && strings.HasSuffix(r.Path, suffix):
			out = append(out, r)
		}
	}
	return out
}

func (e *env) confirms() []poppytest.Request { return e.opRequests("/confirm") }

// confirmBody decodes a logged confirm body.
func confirmBody(t testing.TB, r poppytest.Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("confirm body %q: %v", r.Body, err)
	}
	return m
}

func info(t testing.TB, srv *poppytest.Server, id string) poppytest.OperationInfo {
	t.Helper()
	i, ok := srv.Operations().Get(id)
	if !ok {
		t.Fatalf("the fake has no operation %s", id)
	}
	return i
}

// brief describes an operation for a test message.
func brief(op *operations.Operation) string {
	if op == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%s rev %d %s", op.ID, op.Revision, op.State)
	if c := op.Confirmation; c != nil {
		s += fmt.Sprintf(" (confirmed rev %d by %s)", c.Revision, c.ApprovedBy)
	}
	return s
}

// isPending reports whether err is a *PendingError: an operation the same
// request proposed is still open.
func isPending(err error) bool {
	var pe *operations.PendingError
	return errors.As(err, &pe)
}

// isNotProposed reports whether err is a *StateError: the operation is no
// longer proposed.
func isNotProposed(err error) bool {
	var se *operations.StateError
	return errors.As(err, &se)
}

// isAmbiguous reports whether err is, or wraps, an *AmbiguousTermsError.
func isAmbiguous(err error) bool {
	var ae *operations.AmbiguousTermsError
	return errors.As(err, &ae)
}
