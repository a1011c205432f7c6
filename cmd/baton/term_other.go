//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

// terminalForeground: without a way to ask, every signal is passed on.
func terminalForeground() bool { return false }
