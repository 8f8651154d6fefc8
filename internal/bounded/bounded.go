// Package bounded reads what a Company sends with a bound on its size: the
// SDK's one mechanism for it, so that every body is read the same way and
// too large a one fails with the same error, which package poppy exports as
// ErrResponseTooLarge.
//
// A Company is untrusted input: without a bound, one answer could hold the
// agent's whole memory. One byte past the bound is read, so that a body of
// exactly the bound is told from a longer one.
package bounded

import (
	"errors"
	"io"
)

// ErrTooLarge is returned for a body longer than its bound. Package poppy
// exports it as ErrResponseTooLarge; errors.Is finds either name.
var ErrTooLarge = errors.New("poppy: response exceeds the size limit")

// ReadAll reads r to its end, at most limit bytes. A longer body fails
// with ErrTooLarge, with nothing returned; a failing read returns the
// reader's error as it is, for the caller to say what it was reading.
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, ErrTooLarge
	}
	return b, nil
}

// Body returns rc bounded to limit bytes, for a body read as a stream
// (a JSON decoder, a client library): a read past the bound fails with
// tooLarge, which should wrap ErrTooLarge. Close closes rc.
func Body(rc io.ReadCloser, limit int64, tooLarge error) io.ReadCloser {
	return &body{rc: rc, left: limit, tooLarge: tooLarge}
}

type body struct {
	rc       io.ReadCloser
	left     int64
	tooLarge error
}

func (b *body) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, b.tooLarge
		}
		return b.rc.Read(p)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }
