//go:build !linux

package harness

import (
	"syscall"
	"time"
)

// sysProcAttr: only Linux can tie a child's life to its parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped cannot look at the threads' states here: give the signal a
// moment to land.
func waitStopped(pid int, timeout time.Duration) error {
	time.Sleep(50 * time.Millisecond)
	return nil
}
