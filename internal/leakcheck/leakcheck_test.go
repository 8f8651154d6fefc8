package leakcheck

import (
	"context"
	"strings"
	"testing"
)

// A goroutine a test leaves blocked is found, named by its function, and
// the check stops looking once it ends.
func TestFindsALeftGoroutine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go leaky(ctx, done)
	err := Find()
	if err == nil || !strings.Contains(err.Error(), "leakcheck.leaky") {
		t.Errorf("Find with a goroutine left blocked = %v, want it named", err)
	}
	cancel()
	<-done
	if err := Find(); err != nil {
		t.Errorf("Find once it ended: %v", err)
	}
}

// Parallel tests waiting their turn and the test runner are the testing
// package's, not leaks.
func TestIgnoresTesting(t *testing.T) {
	for _, b := range []string{
		"goroutine 7 [chan receive]:\ntesting.(*T).Parallel(0xc000102000)\n\t/go/src/testing/testing.go:1 +0x1",
		"goroutine 1 [chan receive]:\ntesting.(*T).Run(0xc000102000, {0x1, 0x2}, 0x3)\n\t/go/src/testing/testing.go:1 +0x1",
		"goroutine 5 [syscall]:\nos/signal.signal_recv()\n\t/go/src/runtime/sigqueue.go:1 +0x1",
	} {
		if !ignored(b, nil) {
			t.Errorf("counted:\n%s", b)
		}
	}
	b := "goroutine 9 [select]:\nnet/http.(*persistConn).readLoop(0xc0001)\n\t/go/src/net/http/transport.go:1 +0x1\ncreated by net/http.(*Transport).dialConn in goroutine 8\n\t/go/src/net/http/transport.go:2 +0x2"
	if ignored(b, nil) {
		t.Errorf("not counted:\n%s", b)
	}
	if !ignored(b, []string{"net/http.(*persistConn).readLoop"}) {
		t.Errorf("counted though its top function is ignored:\n%s", b)
	}
}

func leaky(ctx context.Context, done chan struct{}) {
	defer close(done)
	<-ctx.Done()
}
