// Package filelock gives a lock per key that holds across the processes of
// one machine: an exclusive lock on an empty file per key.
package filelock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"path/filepath"
	"time"
)

// The SQLite keystore uses it for its per-key locks: SQLite itself only
// locks the whole database, and holding that lock while an Update's fn does
// network I/O would stall every other key in every process for as long as
// one Company takes to answer.
//
// Each key has an empty lock file in a directory next to the database, named
// by a hash of the key (so no User name appears in a file name). The lock is
// flock(2) on Unix and LockFileEx on Windows: the kernel releases it when the
// holder exits or is killed, so a crashed process never leaves a key locked.
// Both are taken without blocking and retried after a short sleep, so waiting
// ends as soon as ctx is done and no goroutine is left blocked in the kernel.

// Name returns the name of the lock file in dir for a key made of parts:
// the first 128 bits of a SHA-256 of the parts, each prefixed with its
// length so that no two keys share a name.
func Name(dir string, parts ...string) string {
	h := sha256.New()
	for _, s := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:16]))
}

// retryDelay returns how long to sleep before the next attempt to take a file
// lock held by another process: 0.5 ms doubling to 8 ms, with jitter so two
// waiters do not keep colliding.
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
