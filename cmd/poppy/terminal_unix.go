//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// saveTerminal records the settings of stdin's terminal and returns the
// function that puts them back if they changed since. It sets nothing when
// they are unchanged: a process in the background that set its terminal's
// settings would be stopped (SIGTTOU).
func saveTerminal(f *os.File) (restore func()) {
	if f == nil {
		return func() {}
	}
	fd := int(f.Fd())
	saved, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return func() {}
	}
	return func() {
		cur, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
		if err != nil || *cur == *saved {
			return
		}
		_ = unix.IoctlSetTermios(fd, ioctlSetTermios, saved)
	}
}
