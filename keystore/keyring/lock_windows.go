//go:build windows

package keyring

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// fileLock is an exclusive LockFileEx lock on the first byte of a lock file.
// Such locks belong to the file handle, so two opens of the file in one
// process exclude each other as two processes do, and Windows drops the lock
// when its holder exits or is killed. Windows can't remove a file another
// process holds open, so lock files stay (they are empty).
type fileLock struct {
	f *os.File
}

// lockFile waits until it holds the lock on the file at path, creating the
// file if needed, or until ctx is done. It polls with
// LOCKFILE_FAIL_IMMEDIATELY so that no goroutine is left blocked in the
// kernel when ctx ends.
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	h := windows.Handle(f.Fd())
	for attempt := 0; ; attempt++ {
		err := windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, new(windows.Overlapped))
		if err == nil {
			return &fileLock{f: f}, nil
		}
		if !errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			f.Close()
			return nil, &os.PathError{Op: "LockFileEx", Path: path, Err: err}
		}
		if err := sleepCtx(ctx, retryDelay(attempt)); err != nil {
			f.Close()
			return nil, err
		}
	}
}

// unlock releases the lock; the file stays.
func (l *fileLock) unlock(remove bool) { l.f.Close() }
