package operations_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// 500 operations with lost confirm responses, cut connections and 5xx
// injected at random: every confirmed operation is performed exactly once,
// every declined or expired one never (OPS 6, PA-OPS6-03, CO-OPS6-02).
func TestFaultInjection500(t *testing.T) {
	const n = 500
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	injected := map[poppytest.OperationFault]int{}
	faults := func(r poppytest.OperationRequest) poppytest.OperationFault {
		if r.Attempt > 3 {
			return poppytest.FaultNone // let every operation through in the end
		}
		mu.Lock()
		defer mu.Unlock()
		x := rng.IntN(100)
		f := poppytest.FaultNone
		switch r.Kind {
		case "confirm":
			switch {
			case x < 25:
				f = poppytest.FaultLoseResponse
			case x < 40:
				f = poppytest.FaultCut
			case x < 55:
				f = poppytest.Fault5xxAfter
			case x < 65:
				f = poppytest.Fault503
			}
		default:
			switch {
			case x < 10:
				f = poppytest.FaultCut
			case x < 20:
				f = poppytest.Fault503
			}
		}
		injected[f]++
		return f
	}
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{
		TTL: 1000 * time.Hour, Perform: poppytest.PerformSlow, SlowFor: 2 * time.Second, RetryAfter: 1, Faults: faults,
	}}, nil)
	type plan int
	const (
		confirm plan = iota
		decline
		expire
	)
	plans := make([]plan, n)
	for i := range plans {
		switch x := i % 10; {
		case x == 3:
			plans[i] = decline
		case x == 7:
			plans[i] = expire
		}
	}
	declineItems := map[string]bool{}
	for i, p := range plans {
		if p == decline {
			declineItems[fmt.Sprintf("itm_%d", i)] = true
		}
	}
	e.ap.answer = func(r *operations.ApprovalRequest) operations.Decision {
		if declineItems[itemOf(r.Terms)] {
			return operations.Decline
		}
		return operations.Approve
	}
	ids := make([]string, n)
	results := make([]*operations.Operation, n)
	errs := make([]error, n)
	// A broken rule fails the test in seconds, never hangs it: the workers
	// never call Fatal (which would leave the loop below waiting for them),
	// the first proposal that brings no operation stops the work, and a
	// deadline bounds the whole run.
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var (
		wg         sync.WaitGroup
		stopOnce   sync.Once
		proposeErr error
	)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				op, err := e.tryPropose(runCtx, fmt.Sprintf("itm_%d", i))
				if err != nil {
					stopOnce.Do(func() { proposeErr = fmt.Errorf("proposing op %d: %w", i, err); cancel() })
					continue
				}
				ids[i] = op.ID
				results[i], errs[i] = e.c.Handle(runCtx, op, nil)
			}
		}()
	}
	var toExpire []int
feed:
	for i, p := range plans {
		if p == expire {
			toExpire = append(toExpire, i)
			continue
		}
		select {
		case work <- i:
		case <-runCtx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if proposeErr != nil {
		t.Fatal(proposeErr)
	}
	if err := runCtx.Err(); err != nil {
		t.Fatalf("the operations were not handled in time: %v", err)
	}
	// The rest are proposed, then left until they expire.
	left := map[int]*operations.Operation{}
	for _, i := range toExpire {
		left[i] = e.propose(fmt.Sprintf("itm_%d", i))
		ids[i] = left[i].ID
	}
	e.Srv.Clock().Advance(1001 * time.Hour)
	for _, i := range toExpire {
		results[i], errs[i] = e.c.Handle(runCtx, left[i], nil)
	}

	performed := map[string]int{}
	for _, a := range e.Srv.Operations().Performed() {
		performed[a.OperationID]++
	}
	for i, p := range plans {
		fi := info(t, e.Srv, ids[i])
		switch p {
		case confirm:
			if errs[i] != nil || results[i].State != operations.StateSucceeded || fi.Performed != 1 || performed[ids[i]] != 1 {
				t.Errorf("op %d (%s): %v %v, performed %d/%d", i, ids[i], results[i], errs[i], fi.Performed, performed[ids[i]])
			}
		case decline:
			if !errors.Is(errs[i], operations.ErrDeclined) || fi.Performed != 0 || fi.State != "cancelled" || fi.Confirms != 0 {
				t.Errorf("declined op %d: %v, performed %d, %s", i, errs[i], fi.Performed, fi.State)
			}
		case expire:
			if fi.Performed != 0 || fi.State != "expired" || fi.Confirms != 0 {
				t.Errorf("expired op %d: performed %d, %s, %d confirms (%v)", i, fi.Performed, fi.State, fi.Confirms, errs[i])
			}
		}
	}
	if got := len(e.Requests(poppytest.EndpointAPI)); got != n {
		t.Errorf("%d proposals for %d operations", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("faults injected: lost responses %d, cut connections %d, 5xx after performing %d, 503 %d",
		injected[poppytest.FaultLoseResponse], injected[poppytest.FaultCut], injected[poppytest.Fault5xxAfter], injected[poppytest.Fault503])
	if injected[poppytest.FaultLoseResponse] < 50 || injected[poppytest.FaultCut] < 50 || injected[poppytest.Fault5xxAfter] < 50 {
		t.Errorf("too few faults injected: %v", injected)
	}
}

func itemOf(terms []byte) string {
	op := &operations.Operation{Terms: terms}
	s, _ := op.TermsMap()["item_id"].(string)
	return s
}
