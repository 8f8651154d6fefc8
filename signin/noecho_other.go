//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package signin

// echoOff is not available here: the secret is read with
// term.ReadPassword, which switches echo off as it reads.
func echoOff(int) (func(), bool) { return nil, false }
