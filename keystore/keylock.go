package keystore

import (
	"context"
	"sync"
)

// KeyLocks is a set of exclusive locks, one for each Key, shared by the
// goroutines of one process: what a Store implementation needs to serialise
// Updates of one key in-process before taking whatever lock holds across
// processes. The zero value is ready to use. A lock exists only while some goroutine holds or
// waits for it, so the set is as small as the number of keys in use.
//
// Waiting is a send on a one-slot channel, so it can be abandoned when ctx is
// done, and Go queues blocked senders in order, so waiters are served first
// come, first served.
type KeyLocks struct {
	mu    sync.Mutex
	locks map[Key]*keyLock
}

type keyLock struct {
	sem  chan struct{} // holds one token while the lock is held
	refs int           // holders and waiters; guarded by KeyLocks.mu
}

// Lock waits until it holds the lock for key, or ctx is done. The caller
// calls unlock exactly once when it got the lock.
func (l *KeyLocks) Lock(ctx context.Context, key Key) (unlock func(), err error) {
	// A ctx that is already done wins even if the lock is free, so that a
	// cancelled caller never goes on to call fn.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[Key]*keyLock)
	}
	kl := l.locks[key]
	if kl == nil {
		kl = &keyLock{sem: make(chan struct{}, 1)}
		l.locks[key] = kl
	}
	kl.refs++
	l.mu.Unlock()

	select {
	case kl.sem <- struct{}{}:
		return func() {
			<-kl.sem
			l.release(key, kl)
		}, nil
	case <-ctx.Done():
		l.release(key, kl)
		return nil, ctx.Err()
	}
}

func (l *KeyLocks) release(key Key, kl *keyLock) {
	l.mu.Lock()
	kl.refs--
	if kl.refs == 0 {
		delete(l.locks, key)
	}
	l.mu.Unlock()
}

// Size returns the number of locks held or waited for.
func (l *KeyLocks) Size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
