//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package keyring

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// fileLock is an exclusive flock(2) lock on a lock file. flock locks belong
// to the open file description, so two opens of the file in one process
// exclude each other as two processes do, and the kernel drops the lock when
// its holder exits or is killed.
type fileLock struct {
	f    *os.File
	path string
}

// lockFile waits until it holds the lock on the file at path, creating the
// file with mode 0600 if needed, or until ctx is done. It polls with
// LOCK_NB so that no goroutine is left blocked in the kernel when ctx ends.
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flock(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		// The holder before us may have removed the file as it unlocked;
		// a lock on a removed file excludes nobody, so start again on the
		// file now at path.
		locked, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		current, err := os.Stat(path)
		if err == nil && os.SameFile(locked, current) {
			return &fileLock{f: f, path: path}, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
}

func flock(ctx context.Context, f *os.File) error {
	fd := int(f.Fd())
	for attempt := 0; ; attempt++ {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		if err := sleepCtx(ctx, retryDelay(attempt)); err != nil {
			return err
		}
	}
}

// unlock releases the lock, first removing the lock file if remove is set.
func (l *fileLock) unlock(remove bool) {
	if remove {
		os.Remove(l.path)
	}
	l.f.Close()
}
