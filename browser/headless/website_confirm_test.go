package headless_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// PA-OPS4-04 (OPS 4.4) with a real browser: the User approves revision 1,
// then a headless Chromium joined to the Session opens the operation's
// page, checks it shows that revision and clicks its confirm button. The
// Company records a website confirm, the endpoint gets none, and the SDK
// tracks the operation to its result. Asked for a revision the page no
// longer shows, the same step clicks nothing.
func TestPA_OPS4_04_WebsiteConfirmInChromium(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Scopes: map[string][]string{"mediated": {"poppy:read", "poppy:write"}}}})
	id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
	env := &testenv.Env{T: t, Srv: srv, ID: id, Key: key}
	env.Serve(nil)
	env.Agent = env.NewAgent(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess := env.Session("dana")
	p := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, cp *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(cp, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	if _, err := signin.Mediated(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, p); err != nil {
		t.Fatal(err)
	}
	approved := 0
	oc, err := operations.New(sess, &operations.Options{Approver: operations.ApproverFunc(
		func(context.Context, *operations.ApprovalRequest) (operations.Decision, error) {
			approved++
			return operations.Approve, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	propose := func(item string) *operations.Operation {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(`{"item_id":"`+item+`"}`))
		req.Header.Set("Content-Type", "application/json")
		op, _, err := oc.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), nil)
		if err != nil || op == nil || op.URL == "" {
			t.Fatalf("Propose = %+v, %v", op, err)
		}
		return op
	}
	chromium := startChromium(t, srv, nil)
	b, err := browser.New(chromium, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	clickConfirm := operations.WebsiteConfirmerFunc(func(ctx context.Context, w *operations.WebsiteConfirm) error {
		steps++
		if _, ok := b.Joined(); !ok {
			if _, err := b.Join(ctx, w.URL); err != nil {
				return err
			}
		} else if _, err := b.Browse(ctx, w.URL); err != nil {
			return err
		}
		text, err := chromium.Text(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(text, fmt.Sprintf("revision %d", w.Revision)) || !strings.Contains(text, fmt.Sprintf("Confirm revision %d", w.Revision)) {
			return fmt.Errorf("the page does not offer revision %d: %q", w.Revision, text)
		}
		_, err = chromium.Click(ctx, "#confirm", func(u string) bool { return u == w.URL })
		return err
	})

	op := propose("itm_4Qa")
	a, err := oc.Approve(ctx, op)
	if err != nil || approved != 1 {
		t.Fatalf("Approve: %v (%d asked)", err, approved)
	}
	done, err := oc.Confirm(ctx, a, &operations.ConfirmOptions{Website: clickConfirm})
	if err != nil || done.State != operations.StateSucceeded || done.Result == nil {
		t.Fatalf("ConfirmOnWebsite: %+v, %v", done, err)
	}
	info, _ := srv.Operations().Get(op.ID)
	if info.ConfirmedVia != "website" || info.WebsiteConfirms != 1 || info.Confirms != 0 || info.Performed != 1 || steps != 1 {
		t.Errorf("PA-OPS4-04: via %q, %d website and %d endpoint confirms, performed %d, %d steps",
			info.ConfirmedVia, info.WebsiteConfirms, info.Confirms, info.Performed, steps)
	}
	wantText(t, ctx, chromium, "State: succeeded")

	// The page moved on to revision 2 after the SDK read it: the step
	// finds another revision on the page and clicks nothing.
	op2 := propose("itm_5Qa")
	a2, err := oc.Approve(ctx, op2)
	if err != nil {
		t.Fatal(err)
	}
	revise := operations.WebsiteConfirmerFunc(func(ctx context.Context, w *operations.WebsiteConfirm) error {
		if _, err := srv.Operations().Revise(w.OperationID); err != nil {
			return err
		}
		return clickConfirm(ctx, w)
	})
	if _, err := oc.Confirm(ctx, a2, &operations.ConfirmOptions{Website: revise}); err == nil {
		t.Fatal("confirmed revision 2 under an approval of revision 1")
	}
	if info, _ := srv.Operations().Get(op2.ID); info.State != "proposed" || info.WebsiteConfirms != 0 {
		t.Errorf("revision 2: %s, %d website confirms", info.State, info.WebsiteConfirms)
	}
}
