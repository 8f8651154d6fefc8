//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package termtext

import "golang.org/x/sys/unix"

// IsTerminal reports whether fd is a terminal: whether its terminal
// attributes can be read.
func IsTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), ioctlGetTermios)
	return err == nil
}

// EchoOff switches the terminal's echo off and returns the function that
// puts it back. A caller reading a secret calls it before the prompt is
// printed, so that an answer typed ahead of the prompt is not echoed
// either. Lines stay canonical (the terminal edits them) and signals
// stay on.
func EchoOff(fd uintptr) (restore func(), ok bool) {
	old, err := unix.IoctlGetTermios(int(fd), ioctlGetTermios)
	if err != nil {
		return nil, false
	}
	t := *old
	t.Lflag &^= unix.ECHO
	t.Lflag |= unix.ICANON | unix.ISIG
	t.Iflag |= unix.ICRNL
	if err := unix.IoctlSetTermios(int(fd), ioctlSetTermios, &t); err != nil {
		return nil, false
	}
	return func() { _ = unix.IoctlSetTermios(int(fd), ioctlSetTermios, old) }, true
}
