//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package signin

import "golang.org/x/sys/unix"

// echoOff switches the terminal's echo off and returns the function that
// puts it back. It is called before the prompt of a secret is printed, so
// that an answer typed ahead of the prompt is not echoed either (which
// term.ReadPassword, switching echo off only once it reads, would allow).
func echoOff(fd int) (restore func(), ok bool) {
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, false
	}
	t := *old
	t.Lflag &^= unix.ECHO
	t.Lflag |= unix.ICANON | unix.ISIG
	t.Iflag |= unix.ICRNL
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &t); err != nil {
		return nil, false
	}
	return func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }, true
}
