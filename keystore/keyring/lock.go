package keyring

import (
	"context"
	"sync"

	"github.com/poppyproto/poppy/internal/filelock"
)

// keyLocks are the locks of one store, one for each item: an in-process lock
// that goroutines queue for in order, then a lock file (package
// internal/filelock: flock(2) on Unix, LockFileEx on Windows) that excludes
// other processes. Only one goroutine per process at a time polls for a lock
// file.
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
	f, err := filelock.Acquire(ctx, path)
	if err != nil {
		<-kl.sem
		l.release(path, kl)
		return nil, err
	}
	return func(remove bool) {
		f.Unlock(remove)
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
