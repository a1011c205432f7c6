//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// terminalForeground reports whether baton's process group is the
// foreground group of the terminal on stdin, stdout or stderr. A Ctrl-C at
// that terminal then went to the whole group, the command (which shares
// baton's group) included, so passing it on would deliver it twice; many
// programs take a second SIGINT as "quit now, skip the clean-up".
func terminalForeground() bool {
	pgrp := syscall.Getpgrp()
	for fd := range 3 {
		if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && fg == pgrp {
			return true
		}
	}
	return false
}
