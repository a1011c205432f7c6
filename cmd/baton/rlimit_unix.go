//go:build unix

package main

import "syscall"

// raiseFileLimit lifts the soft limit on open files to the hard limit: a
// hold run keeps one socket per idle connection, 10,000 and more. Recent Go
// runtimes do this at start-up too; doing it here keeps the requirement
// visible and independent of that. Failure is not fatal: a run that needs
// more sockets reports the dial error.
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur >= l.Max {
		return
	}
	l.Cur = l.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

// fileLimit is the current soft limit on open files, 0 when unknown.
func fileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}
