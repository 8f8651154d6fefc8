//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package filelock

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// Lock is an exclusive flock(2) lock on one lock file. flock locks belong
// to the open file description, so two goroutines of one process that open
// the file separately exclude each other like two processes do.
type Lock struct {
	f    *os.File
	path string
}

// Acquire waits until it holds an exclusive lock on the file at path,
// creating the file with mode 0600 if needed, or until ctx is done.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flock(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		// The holder before us may have removed the file on its way out
		// (unlock with remove). A lock on a removed file excludes nobody, so
		// start again on the file now at path.
		locked, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		current, err := os.Stat(path)
		if err == nil && os.SameFile(locked, current) {
			return &Lock{f: f, path: path}, nil
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

// unlock releases the lock. With remove, it first removes the lock file, so
// that deleted records leave no lock files behind; lockFile notices when the
// file it locked was removed.
func (l *Lock) Unlock(remove bool) error {
	var err error
	if remove {
		err = os.Remove(l.path)
	}
	return errors.Join(err, l.f.Close())
}
