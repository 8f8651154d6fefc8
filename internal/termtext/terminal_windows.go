//go:build windows

package termtext

import "golang.org/x/sys/windows"

// IsTerminal reports whether fd is a console: whether its console mode can
// be read.
func IsTerminal(fd uintptr) bool {
	var mode uint32
	return windows.GetConsoleMode(windows.Handle(fd), &mode) == nil
}

// EchoOff switches the console's echo off and returns the function that
// puts it back. Input stays line by line, with Ctrl-C handled by the
// system.
func EchoOff(fd uintptr) (restore func(), ok bool) {
	h := windows.Handle(fd)
	var old uint32
	if windows.GetConsoleMode(h, &old) != nil {
		return nil, false
	}
	mode := old&^windows.ENABLE_ECHO_INPUT | windows.ENABLE_PROCESSED_INPUT | windows.ENABLE_LINE_INPUT
	if windows.SetConsoleMode(h, mode) != nil {
		return nil, false
	}
	return func() { _ = windows.SetConsoleMode(h, old) }, true
}
