package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr asks the kernel to SIGKILL the child when the test binary
// dies, so that a test binary killed by go test's -timeout (which runs no
// t.Cleanup) leaves no batond behind. Strictly, the signal follows the death
// of the OS thread that started the child; the Go runtime does not retire
// threads unless a goroutine exits while locked to one, which tests do not
// do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of pid is stopped. kill(SIGSTOP)
// returns before the target's threads have noticed the signal, and a thread
// that is running at that moment can still answer a request sent right
// after Pause.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads of process %d still running %v after SIGSTOP", running, pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid not in state T (stopped) or t
// (traced), from /proc/PID/task/*/stat.
func runningThreads(pid int) (int, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return 0, fmt.Errorf("no threads of process %d in /proc", pid)
	}
	n := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name, which is in parentheses and
		// may itself hold spaces or parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return 0, fmt.Errorf("unreadable %s: %q", p, s)
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			n++
		}
	}
	return n, nil
}
