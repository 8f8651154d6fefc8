package operations_test

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
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// The child process of TestCrashRecovery: it runs one step against the
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

func childMain() int {
	if err := runChild(context.Background(), os.Getenv(childEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func runChild(ctx context.Context, step string) error {
	key, err := poppy.ParseSigningKey([]byte(os.Getenv(childKey)))
	if err != nil {
		return err
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: testenv.ClientID, ClientName: "Example Agent", JWKSURI: testenv.JWKS,
		RedirectURIs: []string{testenv.Redirect}, Keys: []*poppy.SigningKey{key}, Extensions: map[string]string{"operations": "1"}})
	if err != nil {
		return err
	}
	hc, err := poppytest.ClientFromEnv()
	if err != nil {
		return err
	}
	if os.Getenv(childCrash) == "after-202" {
		hc.Transport = exitAfter202{hc.Transport}
	}
	st, err := sqlitestore.Open(os.Getenv(childStore), nil)
	if err != nil {
		return err
	}
	defer st.Close()
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{Store: st, HTTPClient: hc, Clock: poppytest.ClockFromEnv()})
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
		if errors.Is(err, operations.ErrOperationPending) {
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

// OPS 6, PA-OPS6-03: a process killed right after it sent a confirm
// leaves the confirm in the journal; the restarted process recovers the
// operation, which the Company performed exactly once, and sends no new
// proposal.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "keystore.db")
	st, err := sqlitestore.Open(path, nil)
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

// crashEnv is a fake Company, a SQLite keystore the test shares with child
// processes, and a Session signed in in it, for crash tests.
type crashEnv struct {
	t    *testing.T
	env  *env
	path string
	jwk  []byte
}

func newCrashEnv(t *testing.T, srv *poppytest.Server) *crashEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keystore.db")
	st, err := sqlitestore.Open(path, nil)
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
		childAPI+"="+ce.env.Srv.APIURL())
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

// Recover in one process: a journalled confirm that never got through is
// sent again, once the Company is reachable, and tracked; the operation is
// performed once.
func TestRecoverResendsJournalledConfirm(t *testing.T) {
	var cut atomic.Bool
	cut.Store(true)
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Faults: func(r poppytest.OperationRequest) poppytest.OperationFault {
		if cut.Load() {
			return poppytest.FaultCut
		}
		return poppytest.FaultNone
	}}}, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	if _, err := e.c.Confirm(ctx, a, nil); err == nil {
		t.Fatal("Confirm succeeded through cut connections")
	}
	if info(t, e.Srv, op.ID).Performed != 0 {
		t.Fatal("performed")
	}
	cut.Store(false)
	// A new process: same store, a fresh Client.
	c2, err := operations.New(e.sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := c2.Recover(ctx)
	if err != nil || len(ops) != 1 || ops[0].State != operations.StateSucceeded {
		t.Fatalf("Recover: %v %v", ops, err)
	}
	if info(t, e.Srv, op.ID).Performed != 1 {
		t.Error("not performed once")
	}
	// The recovered confirm is the journalled one.
	cs := e.confirms()
	if string(cs[0].Body) != string(cs[len(cs)-1].Body) {
		t.Errorf("bodies differ: %s %s", cs[0].Body, cs[len(cs)-1].Body)
	}
	// Nothing left to recover.
	if ops, err := c2.Recover(ctx); err != nil || len(ops) != 0 {
		t.Errorf("second Recover: %v %v", ops, err)
	}
}

// PA-OPS5-10 across a restart: a confirm journalled under a standing
// permission the User revoked since is not sent again.
func TestRecoverRevokedPermission(t *testing.T) {
	var cut atomic.Bool
	cut.Store(true)
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Faults: func(r poppytest.OperationRequest) poppytest.OperationFault {
		if cut.Load() {
			return poppytest.FaultCut
		}
		return poppytest.FaultNone
	}}}, nil)
	g := grantExchange(t, e, nil)
	op := e.propose("itm_4Qa")
	a, err := e.c.Approve(ctx, op)
	if err != nil || a.By() != operations.ApprovedByStandingPermission {
		t.Fatalf("%v %v", a, err)
	}
	if _, err := e.c.Confirm(ctx, a, nil); err == nil {
		t.Fatal("Confirm through cut connections")
	}
	cut.Store(false)
	if err := e.c.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	n := len(e.confirms())
	c2, _ := operations.New(e.sess, nil)
	if ops, err := c2.Recover(ctx); err == nil {
		t.Errorf("Recover confirmed under a revoked permission: %v", ops)
	}
	if len(e.confirms()) != n || info(t, e.Srv, op.ID).Performed != 0 {
		t.Error("a confirm went out")
	}
}

// The journal and the permissions hold no token, proof or key: nothing a
// Session sent in a header appears in their records.
func TestJournalHoldsNoSecrets(t *testing.T) {
	e := newEnv(t, nil, nil)
	grantExchange(t, e, nil)
	if _, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil); err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for _, r := range e.Requests() {
		if r.AccessToken != "" {
			secrets = append(secrets, r.AccessToken)
		}
		if v := r.Header.Get("DPoP"); v != "" {
			secrets = append(secrets, v)
		}
		if v := r.Form.Get("refresh_token"); v != "" {
			secrets = append(secrets, v)
		}
	}
	if len(secrets) == 0 {
		t.Fatal("no secrets seen")
	}
	n := 0
	for _, kind := range []keystore.Kind{keystore.KindOperation, keystore.KindPermission} {
		keys, err := e.Store.List(ctx, kind, "local-user", e.Srv.Issuer())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			b, err := e.Store.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			n++
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("%s holds a secret", k)
				}
			}
		}
	}
	if n != 2 {
		t.Errorf("%d records, want a journal entry and a permission", n)
	}
}
