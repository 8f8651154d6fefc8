package keyring

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// keyLocks are the locks of one store, one for each item: an in-process lock
// that goroutines queue for in order, then a file lock that excludes other
// processes. Only one goroutine per process at a time polls for a file lock.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock // by lock file path
}

type keyLock struct {
	sem  chan struct{} // holds one token while the lock is held
	refs int           // holders and waiters; guarded by keyLocks.mu
}

// lock waits until it holds the lock of the lock file at path, or ctx is
// done. The caller calls unlock exactly once if it got the lock; with
// remove, unlock removes the lock file (the item was deleted).
func (l *keyLocks) lock(ctx context.Context, path string) (unlock func(remove bool), err error) {
	// A ctx that is already done wins even if the lock is free, so that a
	// cancelled caller never goes on to call fn.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[string]*keyLock)
	}
	kl := l.locks[path]
	if kl == nil {
		kl = &keyLock{sem: make(chan struct{}, 1)}
		l.locks[path] = kl
	}
	kl.refs++
	l.mu.Unlock()

	select {
	case kl.sem <- struct{}{}:
	case <-ctx.Done():
		l.release(path, kl)
		return nil, ctx.Err()
	}
	f, err := lockFile(ctx, path)
	if err != nil {
		<-kl.sem
		l.release(path, kl)
		return nil, err
	}
	return func(remove bool) {
		f.unlock(remove)
		<-kl.sem
		l.release(path, kl)
	}, nil
}

func (l *keyLocks) release(path string, kl *keyLock) {
	l.mu.Lock()
	kl.refs--
	if kl.refs == 0 {
		delete(l.locks, path)
	}
	l.mu.Unlock()
}

// retryDelay returns how long to sleep before trying again to take a file
// lock another process holds: 0.5 ms doubling to 8 ms, with jitter so that
// two waiters do not keep colliding.
func retryDelay(attempt int) time.Duration {
	d := 500 * time.Microsecond << min(attempt, 4)
	return d/2 + rand.N(d)
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
