//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package termtext

import "golang.org/x/sys/unix"

const ioctlGetTermios, ioctlSetTermios = unix.TIOCGETA, unix.TIOCSETA
