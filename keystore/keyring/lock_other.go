//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || windows)

package keyring

import (
	"context"
	"errors"
)

type fileLock struct{}

func lockFile(ctx context.Context, path string) (*fileLock, error) {
	return nil, errors.New("keyring: file locks are not supported on this platform")
}

func (l *fileLock) unlock(remove bool) {}
