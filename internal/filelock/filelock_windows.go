//go:build windows

package filelock

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// Lock is an exclusive LockFileEx lock on the first byte of one lock
// file. Such locks belong to the file handle, so two goroutines of one process
// that open the file separately exclude each other like two processes do.
type Lock struct {
	f *os.File
}

// Acquire waits until it holds an exclusive lock on the file at path,
// creating the file if needed, or until ctx is done.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	h := windows.Handle(f.Fd())
	for attempt := 0; ; attempt++ {
		err := windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, new(windows.Overlapped))
		if err == nil {
			return &Lock{f: f}, nil
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

// unlock releases the lock. Windows can't remove a file that other processes
// hold open, so lock files stay even with remove; they are empty.
func (l *Lock) Unlock(remove bool) error {
	return l.f.Close()
}
