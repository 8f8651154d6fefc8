//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || windows)

package termtext

// IsTerminal reports false: no terminal is recognised here, so nothing is
// read from one as from a person.
func IsTerminal(fd uintptr) bool { return false }

// EchoOff is not available here.
func EchoOff(fd uintptr) (restore func(), ok bool) { return nil, false }
