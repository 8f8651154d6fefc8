package operations_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// webBrowser is a browser the agent controls (PA-5-11), joined to the
// Session: an HTTP client with a cookie jar that loads an operation's page
// and submits its confirm form, as a real browser does (browser/headless
// has the same with Chromium). It confirms only the revision it is asked
// for.
type webBrowser struct {
	e     *env
	hc    *http.Client
	calls atomic.Int32
	// before, if set, runs after the page loaded, before the form is
	// submitted.
	before func(req *operations.WebsiteConfirm)
	// submit: false loads the page and submits nothing.
	submit bool
	// anyRevision submits whatever revision the page shows: a broken step.
	anyRevision bool
}

func newWebBrowser(t *testing.T, e *env) *webBrowser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := *e.Srv.Client()
	hc.Jar = jar
	return &webBrowser{e: e, hc: &hc, submit: true}
}

var (
	formRevision = regexp.MustCompile(`name="revision" value="(\d+)"`)
	formAction   = regexp.MustCompile(`<form id="confirm-form" method="post" action="([^"]+)"`)
)

func (b *webBrowser) ConfirmOnWebsite(ctx context.Context, req *operations.WebsiteConfirm) error {
	b.calls.Add(1)
	// Join the Session, landing on the operation's page (spec 5).
	a, err := b.e.sess.SignBrowserAssertion(req.URL)
	if err != nil {
		return err
	}
	resp, err := b.hc.PostForm(a.Endpoint, url.Values{"assertion": {a.Value()}})
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.String() != req.URL {
		return fmt.Errorf("join landed on %s (%d)", resp.Request.URL, resp.StatusCode)
	}
	if b.before != nil {
		b.before(req)
	}
	if !b.submit {
		return nil
	}
	if b.anyRevision {
		resp, err := b.hc.Get(req.URL)
		if err != nil {
			return err
		}
		page, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	m, act := formRevision.FindSubmatch(page), formAction.FindSubmatch(page)
	if m == nil || act == nil {
		return errors.New("the page has no confirm form")
	}
	rev, _ := strconv.Atoi(string(m[1]))
	if rev != req.Revision && !b.anyRevision {
		return fmt.Errorf("the page shows revision %d, not the approved %d", rev, req.Revision)
	}
	target, _ := url.Parse(req.URL)
	target, _ = target.Parse(string(act[1]))
	resp, err = b.hc.PostForm(target.String(), url.Values{"revision": {string(m[1])}, "approved_by": {string(req.ApprovedBy)}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("the confirm form answered %d", resp.StatusCode)
	}
	return nil
}

// PA-OPS4-04 (OPS 4.4): confirming on the website is the same operation,
// with the OPS 5.1 duties: the website is asked only with the User's
// approval of that revision, asked through the Approver with the Company's
// name and the summary (PA-OPS5-02, PA-OPS5-03) before anything happens.
// The Company records the confirm as made on the website, nothing is sent
// to the endpoint's confirm, and the operation is tracked to its result
// and performed once.
func TestPA_OPS4_04_ConfirmOnWebsite(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow}}, nil)
	op := e.propose("itm_4Qa")
	b := newWebBrowser(t, e)
	b.before = func(req *operations.WebsiteConfirm) {
		asked := e.ap.asked()
		// PA-OPS4-04, PA-OPS5-02: the User was asked, for this revision, first.
		if len(asked) != 1 || asked[0].Company != "Example Company" || asked[0].Summary != op.Summary ||
			asked[0].Revision != req.Revision || req.OperationID != op.ID || req.URL != op.URL {
			t.Errorf("the website step ran with %+v after asking %+v", req, asked)
		}
	}
	a, err := e.c.Approve(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	done, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{Website: b})
	if err != nil || done.State != operations.StateSucceeded || done.Result == nil || done.Confirmation == nil || done.Confirmation.Revision != 1 {
		t.Fatalf("ConfirmOnWebsite: %s %v", brief(done), err)
	}
	fi := info(t, e.Srv, op.ID)
	if fi.ConfirmedVia != "website" || fi.WebsiteConfirms != 1 || fi.Confirms != 0 || fi.Performed != 1 || b.calls.Load() != 1 {
		t.Errorf("PA-OPS4-04: confirmed via %q, %d website confirms, %d endpoint confirms, performed %d, %d steps",
			fi.ConfirmedVia, fi.WebsiteConfirms, fi.Confirms, fi.Performed, b.calls.Load())
	}
	if len(e.confirms()) != 0 {
		t.Errorf("%d confirms at the endpoint", len(e.confirms()))
	}
	// Done: nothing left to recover, and a second call does nothing.
	if ops, err := e.c.Recover(ctx); err != nil || len(ops) != 0 {
		t.Errorf("Recover: %v %v", ops, err)
	}
	if again, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{Website: b}); err != nil || again.State != operations.StateSucceeded || b.calls.Load() != 1 {
		t.Errorf("again: %s %v, %d steps", brief(again), err, b.calls.Load())
	}
}

// PA-OPS4-04: the OPS 5.1 duties however the operation is confirmed. The
// website is never asked for a revision the approval doesn't cover
// (PA-OPS5-01, PA-OPS5-11), after the User withdrew the approval
// (PA-OPS7-05), for an expired revision (PA-OPS3-02), or for an operation
// without a url; and a website that confirmed another revision than the
// approved one is reported, not taken as the User's.
func TestPA_OPS4_04_WebsiteDuties(t *testing.T) {
	e := newEnv(t, nil, nil)
	b := newWebBrowser(t, e)

	// New terms after the approval: the approval doesn't cover them.
	op := e.propose("itm_1")
	a, err := e.c.Approve(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Srv.Operations().Revise(op.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{Website: b}); !errors.Is(err, operations.ErrApprovalMismatch) {
		t.Errorf("PA-OPS4-04, PA-OPS5-01: revised: %v", err)
	}
	// Withdrawn before the confirm.
	op2 := e.propose("itm_2")
	a2, _ := e.c.Approve(ctx, op2)
	if _, err := a2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Confirm(ctx, a2, &operations.ConfirmOptions{Website: b}); !errors.Is(err, operations.ErrApprovalWithdrawn) {
		t.Errorf("PA-OPS4-04, PA-OPS7-05: withdrawn: %v", err)
	}
	// An approval of another Client can't be used.
	other, _ := operations.New(e.sess, &operations.Options{Approver: e.ap})
	op3 := e.propose("itm_3")
	v3, _ := other.Get(ctx, op3.ID)
	a3, _ := other.Approve(ctx, v3)
	if _, err := e.c.Confirm(ctx, a3, &operations.ConfirmOptions{Website: b}); err == nil {
		t.Error("PA-OPS4-04, PA-OPS5-03: another Client's approval was used")
	}
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("PA-OPS4-04: the website was asked %d times without an approval of the revision", n)
	}
	for _, id := range []string{op.ID, op2.ID, op3.ID} {
		if fi := info(t, e.Srv, id); fi.WebsiteConfirms != 0 || fi.State != "proposed" {
			t.Errorf("%s: %d website confirms, %s", id, fi.WebsiteConfirms, fi.State)
		}
	}

	// A website that confirms whatever the page shows, on a page the
	// Company revised after the SDK read it: the confirmation is of
	// another revision than the User approved, and is reported.
	op4 := e.propose("itm_4")
	a4, _ := e.c.Approve(ctx, op4)
	bad := newWebBrowser(t, e)
	bad.anyRevision = true
	bad.before = func(*operations.WebsiteConfirm) { e.Srv.Operations().Revise(op4.ID) }
	got, err := e.c.Confirm(ctx, a4, &operations.ConfirmOptions{Website: bad})
	if !errors.Is(err, operations.ErrApprovalMismatch) || got == nil || got.Confirmation == nil || got.Confirmation.Revision != 2 {
		t.Errorf("a confirmation of revision 2 under an approval of 1: %s %v", brief(got), err)
	}
}

// A WebsiteConfirmer that confirms nothing: ErrNotConfirmedOnWebsite, the
// journal forgets the confirm (Recover sends nothing), and the approval can
// still be confirmed at the endpoint.
func TestConfirmOnWebsiteNotConfirmed(t *testing.T) {
	e := newEnv(t, nil, nil)
	op := e.propose("itm_4Qa")
	b := newWebBrowser(t, e)
	b.submit = false
	a, _ := e.c.Approve(ctx, op)
	got, err := e.c.Confirm(ctx, a, &operations.ConfirmOptions{Website: b})
	if !errors.Is(err, operations.ErrNotConfirmedOnWebsite) || got == nil || got.State != operations.StateProposed {
		t.Fatalf("%s %v", brief(got), err)
	}
	c2, _ := operations.New(e.sess, nil)
	if ops, err := c2.Recover(ctx); err != nil || len(ops) != 0 || len(e.confirms()) != 0 {
		t.Errorf("Recover: %v %v, %d confirms", ops, err, len(e.confirms()))
	}
	if done, err := e.c.Confirm(ctx, a, nil); err != nil || done.State != operations.StateSucceeded {
		t.Errorf("Confirm after: %s %v", brief(done), err)
	}
	// An operation without a url: ErrNoWebsite, and nothing is sent.
	raw := fmt.Sprintf(`{"operation_id":"op_nourl","revision":1,"state":"proposed","summary":"Do it.","expires_at":%q,"confirmation":null,"result":null}`,
		e.Srv.Clock().Now().Add(time.Hour).UTC().Format(time.RFC3339))
	nourl, err := operations.Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := e.c.Observe(nourl, exchangeAction)
	an, err := e.c.Approve(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	n := len(e.Requests())
	if _, err := e.c.Confirm(ctx, an, &operations.ConfirmOptions{Website: b}); !errors.Is(err, operations.ErrNoWebsite) || len(e.Requests()) != n {
		t.Errorf("without a url: %v, %d requests", err, len(e.Requests())-n)
	}
}

// OPS 6 with a website confirm: a process that dies during the website
// step leaves the confirm in the journal. Recover reads the operation: if
// the website confirmed it, it is tracked to its result (no confirm at the
// endpoint); if not, the journalled approval is confirmed at the endpoint,
// as it covers the revision however it is confirmed. Each is performed
// once (CO-OPS6-02).
func TestConfirmOnWebsiteRecovered(t *testing.T) {
	for _, confirmed := range []bool{true, false} {
		t.Run(fmt.Sprintf("confirmed=%v", confirmed), func(t *testing.T) {
			e := newEnv(t, nil, nil)
			op := e.propose("itm_4Qa")
			b := newWebBrowser(t, e)
			b.submit = confirmed
			dctx, die := context.WithCancel(ctx)
			step := operations.WebsiteConfirmerFunc(func(ctx context.Context, req *operations.WebsiteConfirm) error {
				err := b.ConfirmOnWebsite(ctx, req)
				die() // the process ends before it reads the answer
				return err
			})
			a, _ := e.c.Approve(ctx, op)
			if _, err := e.c.Confirm(dctx, a, &operations.ConfirmOptions{Website: step}); err == nil {
				t.Fatal("no error after the process died")
			}
			c2, _ := operations.New(e.sess, nil)
			ops, err := c2.Recover(ctx)
			if err != nil || len(ops) != 1 || ops[0].State != operations.StateSucceeded {
				t.Fatalf("Recover: %v %v", ops, err)
			}
			fi := info(t, e.Srv, op.ID)
			wantVia, wantConfirms := "website", 0
			if !confirmed {
				wantVia, wantConfirms = "endpoint", 1
			}
			if fi.Performed != 1 || fi.ConfirmedVia != wantVia || fi.Confirms != wantConfirms {
				t.Errorf("performed %d, via %q, %d endpoint confirms", fi.Performed, fi.ConfirmedVia, fi.Confirms)
			}
		})
	}
}

// PA-OPS4-04 through the default path: Handle with ConfirmOptions.Website
// asks the User first, confirms on the website (nothing at the endpoint's
// confirm) and tracks the operation to its result; with NoTrack as well,
// it returns the operation as the website left it, in_progress, without
// reading it again until final.
func TestPA_OPS4_04_HandleOnWebsite(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow}}, nil)
	b := newWebBrowser(t, e)
	b.before = func(req *operations.WebsiteConfirm) {
		if asked := e.ap.asked(); len(asked) == 0 || asked[len(asked)-1].Revision != req.Revision {
			t.Errorf("the website step ran before the User was asked for revision %d", req.Revision)
		}
	}
	op := e.propose("itm_4Qa")
	done, err := e.c.Handle(ctx, op, &operations.ConfirmOptions{Website: b})
	if err != nil || done.State != operations.StateSucceeded || done.Result == nil {
		t.Fatalf("Handle on the website: %s %v", brief(done), err)
	}
	if fi := info(t, e.Srv, op.ID); fi.ConfirmedVia != "website" || fi.Confirms != 0 || fi.Performed != 1 || b.calls.Load() != 1 || len(e.confirms()) != 0 {
		t.Errorf("confirmed via %q, %d endpoint confirms, performed %d, %d steps", fi.ConfirmedVia, fi.Confirms, fi.Performed, b.calls.Load())
	}
	op2 := e.propose("itm_5Qa")
	got, err := e.c.Handle(ctx, op2, &operations.ConfirmOptions{Website: b, NoTrack: true})
	if err != nil || got.State != operations.StateInProgress || b.calls.Load() != 2 {
		t.Fatalf("Handle with NoTrack: %s %v, %d steps", brief(got), err, b.calls.Load())
	}
	// Handled again, an in_progress operation is returned as it is.
	reads := len(e.opRequests(""))
	if again, err := e.c.Handle(ctx, got, &operations.ConfirmOptions{NoTrack: true}); err != nil || again.State != operations.StateInProgress || len(e.opRequests("")) != reads {
		t.Errorf("again with NoTrack: %s %v, %d reads", brief(again), err, len(e.opRequests(""))-reads)
	}
	if final, err := e.c.Track(ctx, got.ID); err != nil || final.State != operations.StateSucceeded {
		t.Errorf("Track: %s %v", brief(final), err)
	}
}
