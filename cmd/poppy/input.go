package main

// Standard input that Ctrl-C can stop. A read from a terminal or a pipe
// can't be cancelled, so one goroutine at a time reads the real stdin, on
// demand, into a buffer all readers of the run share (the chat's lines, an
// approval's answer, Mediated Sign-In's fields), and every Read and
// ReadLine returns as soon as the run's context ends, whether or not the
// read below it has. Since the buffer is shared, no byte is lost between
// readers: a line is taken out whole, and what follows it stays for the
// next reader.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
)

// maxLine bounds a line read from stdin.
const maxLine = 64 << 10

var errLineTooLong = errors.New("poppy: a line of input is longer than 64 KiB")

// input is the run's stdin.
type input struct {
	r   io.Reader
	fd  uintptr         // r's file descriptor; ^0 when r is not a file
	ctx context.Context // the run's: it ends on Ctrl-C

	mu      sync.Mutex
	buf     []byte
	err     error         // what ended r, returned once buf is empty
	reading chan struct{} // closed when the read in flight ends; nil if none
}

func newInput(ctx context.Context, r io.Reader) *input {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	in := &input{r: r, fd: ^uintptr(0), ctx: ctx}
	if f, ok := r.(*os.File); ok {
		in.fd = f.Fd()
	}
	return in
}

// Fd is the file descriptor of stdin (^0 when it is not a file), so that
// a prompter can tell a terminal and switch its echo off for a secret.
func (in *input) Fd() uintptr { return in.fd }

// Read reads what stdin holds, waiting until the run's context ends.
func (in *input) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		in.mu.Lock()
		if len(in.buf) > 0 {
			n := copy(p, in.buf)
			in.buf = in.buf[n:]
			in.mu.Unlock()
			return n, nil
		}
		wait, err := in.fillLocked()
		in.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if err := in.wait(in.ctx, wait); err != nil {
			return 0, err
		}
	}
}

// ReadLine returns the next line, without its "\n" or "\r\n", waiting
// until ctx ends. At the end of stdin it returns the last unterminated
// line, then io.EOF.
func (in *input) ReadLine(ctx context.Context) (string, error) {
	for {
		in.mu.Lock()
		if i := bytes.IndexByte(in.buf, '\n'); i >= 0 {
			line := string(bytes.TrimSuffix(in.buf[:i], []byte("\r")))
			in.buf = in.buf[i+1:]
			in.mu.Unlock()
			if len(line) > maxLine {
				return "", errLineTooLong
			}
			return line, nil
		}
		if len(in.buf) > maxLine {
			in.buf = nil
			in.mu.Unlock()
			return "", errLineTooLong
		}
		if in.err != nil && len(in.buf) > 0 {
			line := string(bytes.TrimSuffix(in.buf, []byte("\r")))
			in.buf = nil
			in.mu.Unlock()
			return line, nil
		}
		wait, err := in.fillLocked()
		in.mu.Unlock()
		if err != nil {
			return "", err
		}
		if err := in.wait(ctx, wait); err != nil {
			return "", err
		}
	}
}

// fillLocked starts a read of stdin unless one is in flight, and returns
// the channel that closes when it ends; or stdin's error once it ended.
func (in *input) fillLocked() (chan struct{}, error) {
	if in.err != nil {
		return nil, in.err
	}
	if in.reading == nil {
		done := make(chan struct{})
		in.reading = done
		go func() {
			b := make([]byte, 4096)
			n, err := in.r.Read(b)
			in.mu.Lock()
			in.buf = append(in.buf, b[:n]...)
			if err != nil {
				in.err = err
			}
			in.reading = nil
			in.mu.Unlock()
			close(done)
		}()
	}
	return in.reading, nil
}

func (in *input) wait(ctx context.Context, done chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-in.ctx.Done():
		return in.ctx.Err()
	}
}
