//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || windows)

package filelock

import (
	"context"
	"errors"
)

type Lock struct{}

func Acquire(ctx context.Context, path string) (*Lock, error) {
	return nil, errors.New("keystore: file locks are not supported on this platform")
}

func (l *Lock) Unlock(remove bool) error { return nil }
