// Package opcrash is the harness of package operations' crash tests:
// child processes of the test binary that share a keystore on disk with
// the test, killed (or dying on purpose) while the Company holds their
// request. keystore/sqlitestore (a module of its own) runs them on SQLite.
package opcrash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// Store is a keystore the children open and close.
type Store interface {
	keystore.Store
	Close() error
}

// exchangeAction is the action of the fake's exchange endpoint.
var exchangeAction = operations.OpenAPIAction("POST", "/orders/{id}/exchanges")

// env is a fake Company, an agent listing the operations extension, a
// Session signed in with poppy:read and poppy:write, and a Client.
type env struct {
	*testenv.Env
	sess *poppy.Session
	c    *operations.Client
}

// signIn signs sess in by Device Sign-In, the fake's browser approving.
func signIn(t testing.TB, e *testenv.Env, sess *poppy.Session) {
	t.Helper()
	p := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := e.Srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	if _, err := signin.Device(context.Background(), sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, p); err != nil {
		t.Fatal(err)
	}
}

// propose sends the spec's exchange request (OPS 4.1) for item and
// returns the operation the Company proposed.
func (e *env) propose(item string) *operations.Operation {
	e.T.Helper()
	body := `{"item_id":"` + item + `","replacement_sku":"stormline-insulated-m"}`
	req, err := http.NewRequest("POST", e.Srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	op, resp, err := e.c.Propose(context.Background(), req, exchangeAction, nil)
	if err != nil {
		e.T.Fatal(err)
	}
	if op == nil {
		resp.Body.Close()
		e.T.Fatalf("no operation: HTTP %d", resp.StatusCode)
	}
	return op
}

func info(t testing.TB, srv *poppytest.Server, id string) poppytest.OperationInfo {
	t.Helper()
	i, ok := srv.Operations().Get(id)
	if !ok {
		t.Fatalf("the fake has no operation %s", id)
	}
	return i
}

// The child process of CrashRecovery and CrashBetweenProposalAndJournal: it runs one step against the
// parent's fake Company with the parent's keystore and agent key.
const (
	childEnv   = "POPPY_OPERATIONS_CHILD"
	childStore = "POPPY_OPERATIONS_STORE"
	childKey   = "POPPY_OPERATIONS_KEY"
	childOp    = "POPPY_OPERATIONS_OP"
	childAPI   = "POPPY_OPERATIONS_API"
	childCrash = "POPPY_OPERATIONS_CRASH" // "after-202": exit once a 202 arrived, before the SDK reads it
)

// exitAfter202 ends the process as soon as a proposing request's 202
// arrived: the Company proposed, and the SDK never journals the answer.
type exitAfter202 struct{ base http.RoundTripper }

func (t exitAfter202) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusAccepted && strings.HasSuffix(r.URL.Path, "/exchanges") {
		os.Exit(9)
	}
	return resp, err
}

// ChildMain, called first in a TestMain, runs the child of a crash test
// and exits when this process is one; open gives it the keystore the
// test's processes share, from the test's directory.
func ChildMain(open func(dir string) (Store, error)) {
	if os.Getenv(childEnv) == "" {
		return
	}
	if err := runChild(context.Background(), os.Getenv(childEnv), open); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(ctx context.Context, step string, open func(string) (Store, error)) error {
	st, err := open(os.Getenv(childStore))
	if err != nil {
		return err
	}
	defer st.Close()
	var wrap func(http.RoundTripper) http.RoundTripper
	if os.Getenv(childCrash) == "after-202" {
		wrap = func(rt http.RoundTripper) http.RoundTripper { return exitAfter202{rt} }
	}
	agent, err := testenv.ChildAgent([]byte(os.Getenv(childKey)), map[string]string{"operations": "1"}, st, wrap)
	if err != nil {
		return err
	}
	company, err := agent.Company(ctx, "example.test")
	if err != nil {
		return err
	}
	sess, err := company.Session(ctx, "local-user", nil)
	if err != nil {
		return err
	}
	auto := operations.ApproverFunc(func(context.Context, *operations.ApprovalRequest) (operations.Decision, error) {
		return operations.Approve, nil
	})
	c, err := operations.New(sess, &operations.Options{Approver: auto})
	if err != nil {
		return err
	}
	switch step {
	case "confirm":
		op, err := c.Get(ctx, os.Getenv(childOp))
		if err != nil {
			return err
		}
		a, err := c.Approve(ctx, op)
		if err != nil {
			return err
		}
		fmt.Println("confirming")
		_, err = c.Confirm(ctx, a, nil) // killed while the Company holds it
		return err
	case "propose":
		body := `{"item_id":"` + os.Getenv(childOp) + `","replacement_sku":"stormline-insulated-m"}`
		req, err := http.NewRequest("POST", os.Getenv(childAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		op, _, err := c.Propose(ctx, req, exchangeAction, nil) // killed while the Company holds it
		if pe := (*operations.PendingError)(nil); errors.As(err, &pe) {
			fmt.Println("pending", op.ID)
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Println("proposed", op.ID)
		return nil
	case "recover":
		ops, err := c.Recover(ctx)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(ops)
	}
	return fmt.Errorf("unknown step %q", step)
}

// CrashRecovery (OPS 6, PA-OPS6-03): a process killed right after it sent
// a confirm leaves the confirm in the journal; the restarted process
// recovers the operation, which the Company performed exactly once, and
// sends no new proposal. open gives the keystore the test's processes
// share, from the test's directory; the test binary's TestMain must call
// ChildMain with the same.
func CrashRecovery(t *testing.T, open func(dir string) (Store, error)) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	path := t.TempDir()
	st, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := poppytest.NewServer(t, nil)
	id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
	te := &testenv.Env{T: t, Srv: srv, ID: id, Key: key, Store: st}
	te.Serve(nil)
	te.Agent = te.NewAgent(nil)
	sess := te.Session("local-user")
	signIn(t, te, sess)
	c, err := operations.New(sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{Env: te, sess: sess, c: c}
	op := e.propose("itm_4Qa")
	jwk, err := key.MarshalPrivateJWK()
	if err != nil {
		t.Fatal(err)
	}
	child := func(step string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), srv.Env()...)
		cmd.Env = append(cmd.Env, childEnv+"="+step, childStore+"="+path, childKey+"="+string(jwk), childOp+"="+op.ID)
		cmd.Stderr = os.Stderr
		return cmd
	}

	release := srv.Operations().HoldConfirms()
	defer release()
	first := child("confirm")
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	go bufio.NewReader(out).ReadString('\n')
	deadline := time.Now().Add(60 * time.Second)
	for info(t, srv, op.ID).Confirms == 0 {
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatal("the child sent no confirm")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Killed right after the confirm left it, before any answer.
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	release() // the Company records and performs the confirm it got
	for info(t, srv, op.ID).State != "succeeded" {
		if time.Now().After(deadline) {
			t.Fatalf("the held confirm never finished: %s", info(t, srv, op.ID).State)
		}
		time.Sleep(10 * time.Millisecond)
	}

	second := child("recover")
	b, err := second.Output()
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	var got []*operations.Operation
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("recover output %q: %v", b, err)
	}
	if len(got) != 1 || got[0].ID != op.ID || got[0].State != operations.StateSucceeded || got[0].Result == nil ||
		!strings.Contains(got[0].Result.Summary, "Exchange placed") {
		t.Fatalf("recovered %s", b)
	}
	fi := info(t, srv, op.ID)
	if fi.Performed != 1 {
		t.Errorf("performed %d times", fi.Performed)
	}
	if n := len(e.Requests(poppytest.EndpointAPI)); n != 1 {
		t.Errorf("%d proposals", n)
	}
	// A later Recover has nothing left to do.
	again := child("recover")
	if b, err := again.Output(); err != nil || strings.TrimSpace(string(b)) != "null" {
		t.Errorf("second recover: %s %v", b, err)
	}
}

// crashEnv is a fake Company, a keystore the test shares with child
// processes, and a Session signed in in it, for crash tests.
type crashEnv struct {
	t    *testing.T
	env  *env
	path string
	jwk  []byte
}

func newCrashEnv(t *testing.T, srv *poppytest.Server, open func(string) (Store, error)) *crashEnv {
	t.Helper()
	path := t.TempDir()
	st, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
	te := &testenv.Env{T: t, Srv: srv, ID: id, Key: key, Store: st}
	te.Serve(nil)
	te.Agent = te.NewAgent(nil)
	sess := te.Session("local-user")
	signIn(t, te, sess)
	c, err := operations.New(sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := key.MarshalPrivateJWK()
	if err != nil {
		t.Fatal(err)
	}
	return &crashEnv{t: t, env: &env{Env: te, sess: sess, c: c}, path: path, jwk: jwk}
}

func (ce *crashEnv) cmd(step, arg string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ce.env.Srv.Env()...)
	cmd.Env = append(cmd.Env, childEnv+"="+step, childStore+"="+ce.path, childKey+"="+string(ce.jwk), childOp+"="+arg,
		childAPI+"="+ce.env.Srv.EndpointURL(poppytest.EndpointAPI))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// run runs a child to its end and returns its output.
func (ce *crashEnv) run(step, arg string) string {
	ce.t.Helper()
	var out, errOut bytes.Buffer
	cmd := ce.cmd(step, arg)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		ce.t.Fatalf("child %s: %v\n%s", step, err, errOut.String())
	}
	return out.String()
}

// childProc is a child started in the background.
type childProc struct {
	cmd *exec.Cmd
	buf bytes.Buffer
}

func (ce *crashEnv) start(step, arg string, env ...string) *childProc {
	ce.t.Helper()
	p := &childProc{cmd: ce.cmd(step, arg, env...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.buf, &p.buf
	if err := p.cmd.Start(); err != nil {
		ce.t.Fatal(err)
	}
	return p
}

func (p *childProc) kill()         { _ = p.cmd.Process.Kill() }
func (p *childProc) wait()         { _ = p.cmd.Wait() }
func (p *childProc) exitCode() int { return p.cmd.ProcessState.ExitCode() }
func (p *childProc) out() string   { return p.buf.String() }

// CrashBetweenProposalAndJournal (OPS 6 across a restart): a process that dies after it sent a proposing
// request, before it journalled the answer, leaves the request in the
// journal; the restarted process sends the same request with the same
// Idempotency-Key and gets the operation the Company proposed for the
// first one. Six items, each dying one of two ways: killed (SIGKILL) while
// the Company holds the request, or exiting as soon as the 202 arrived.
// One operation per item, against a Company that proposes anew for every
// request it doesn't recognise as a retry; and a later process sends
// nothing while it is open (PA-OPS6-04). open and ChildMain are as for
// CrashRecovery.
func CrashBetweenProposalAndJournal(t *testing.T, open func(dir string) (Store, error)) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	var held atomic.Pointer[childProc]
	killed := make(chan struct{}, 1)
	hook := func(r poppytest.OperationRequest) poppytest.OperationFault {
		if p := held.Load(); p != nil && r.Attempt == 1 {
			// The child sent the request and waits for the answer: kill it
			// now, then let the Company propose.
			p.kill()
			<-killed
		}
		return poppytest.FaultNone
	}
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true, ProposeFaults: hook}})
	ce := newCrashEnv(t, srv, open)
	const items = 6
	for i := range items {
		item := fmt.Sprintf("itm_%d", i)
		if i%2 == 0 {
			p := ce.start("propose", item)
			held.Store(p)
			p.wait()
			held.Store(nil)
			killed <- struct{}{}
			if p.exitCode() == 0 {
				t.Fatalf("%s: the child was not killed: %s", item, p.out())
			}
		} else {
			p := ce.start("propose", item, childCrash+"=after-202")
			p.wait()
			if p.exitCode() != 9 {
				t.Fatalf("%s: the child did not exit after the 202: %d %s", item, p.exitCode(), p.out())
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for len(srv.Operations().All()) <= i {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the Company proposed nothing", item)
			}
			time.Sleep(10 * time.Millisecond)
		}
		out := ce.run("propose", item)
		all := srv.Operations().All()
		if len(all) != i+1 {
			t.Fatalf("PA-OPS6-04: %d operations for %d items after the restarts (%s: %s)", len(all), i+1, item, out)
		}
		last := all[i]
		if want := "proposed " + last.ID; strings.TrimSpace(out) != want {
			t.Errorf("%s: the restarted child: %q, want %q", item, out, want)
		}
		if k := last.IdempotencyKeys; len(k) != 2 || k[0] == "" || k[0] != k[1] {
			t.Errorf("%s: Idempotency-Keys %q", item, k)
		}
	}
	all := srv.Operations().All()
	out := ce.run("propose", "itm_0")
	if want := "pending " + all[0].ID; strings.TrimSpace(out) != want {
		t.Errorf("a later child: %q, want %q", out, want)
	}
	if n := len(ce.env.Requests(poppytest.EndpointAPI)); n != 2*items {
		t.Errorf("%d proposing requests, want %d", n, 2*items)
	}
}
