package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/client"
)

// Exit statuses of a command that did not run, as shells report them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

// minLockLease keeps the keep-alive of baton lock meaningful: it must get an
// extend through within a third of the lease.
const minLockLease = 100 * time.Millisecond

const lockUsage = `baton lock: run a command while holding a lock.

Usage:
  baton lock KEY [flags] -- COMMAND [ARGS...]

Waits for the lock on KEY, then runs COMMAND with two more environment
variables: BATON_KEY (the key) and BATON_TOKEN (the lock's fencing token,
to hand to whatever the lock protects). While the command runs, baton keeps
the lease alive (an extend every third of --lease); when it exits, baton
releases the lock and exits with the command's status. Two baton lock on
the same key run their commands one after the other, never at once: this is
how to serialize cron jobs and deploys across machines. The acquire names
an owner, HOST:PID: and random hex digits, so that baton query KEY shows
which machine and process holds the lock.

Flags:
  --lease DURATION   the lease kept alive while the command runs, 100ms to
                     24h (default 10s). If baton dies, the lock is freed this
                     long after the last extend.
  --wait DURATION    how long to wait for the lock: 0 waits forever, -1 does
                     not wait (try-lock), e.g. 5m (default 0)
  --grace DURATION   after the lock is lost, how long the command has to exit
                     after SIGTERM before it gets SIGKILL (default 10s)
` + commonHelp + `  --help             show this text

If the lock is lost while the command runs (someone force-released it, or
no server could be reached for a whole lease), the command gets SIGTERM, and
SIGKILL if it is still running --grace later; baton then exits 76.

Signals: SIGINT and SIGTERM sent to baton while the command runs are passed
on to the command, and baton waits for it to exit (a Ctrl-C typed at the
terminal reaches the command directly, and is not passed on twice). While
baton is still waiting for the lock, SIGINT or SIGTERM gives up (exit 130)
and the command does not run.

Exit status: the command's status (128+N when signal N ended it);
75 the lock could not be had (not granted within --wait, or no server could
be reached), the command did not run; 76 the lock was lost while the command
ran; 126 the command could not be started; 127 the command was not found;
2 bad usage; 130 interrupted while waiting for the lock.
`

type lockOpts struct {
	commonOpts
	lease time.Duration
	wait  waitFlag
	grace time.Duration
}

// lockFlags defines the flags of baton lock; it has no --json, since its
// output is the command's.
func lockFlags(o *lockOpts, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton lock", flag.ContinueOnError)
	commonFlags(fs, &o.commonOpts, getenv, false)
	fs.DurationVar(&o.lease, "lease", 10*time.Second, "")
	fs.Var(&o.wait, "wait", "")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "")
	return fs
}

func runLock(e env, args []string) int {
	var o lockOpts
	fs := lockFlags(&o, e.getenv)
	// The command is everything after the first "--"; flags and KEY are
	// before it.
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i+1:]
			break
		}
	}
	pos, code, done := parseCommand(e, "lock", lockUsage, fs, args, 1, 1)
	if done {
		return code
	}
	key := pos[0]
	switch {
	case len(command) == 0:
		return usageError(e, "lock", errors.New("missing -- COMMAND"))
	case o.lease < minLockLease || o.lease > client.MaxLease:
		return usageError(e, "lock", fmt.Errorf("--lease %v: want 100ms to 24h", o.lease))
	case o.grace < 0:
		return usageError(e, "lock", fmt.Errorf("--grace %v: must not be negative", o.grace))
	}
	if err := checkWait(o.wait.d); err != nil {
		return usageError(e, "lock", err)
	}
	c, code, ok := dial(e, "lock", &o.commonOpts)
	if !ok {
		return code
	}
	defer c.Close()

	bound := time.Duration(0)
	switch {
	case o.wait.d < 0:
		bound = o.timeout
	case o.wait.d > 0 && o.timeout > 0:
		bound = o.wait.d + o.timeout
	}
	actx, cancel := limited(e, bound)
	l, err := c.Acquire(actx, key, o.lease, o.wait.d)
	cancel()
	if err != nil {
		if e.ctx.Err() != nil {
			fmt.Fprintln(e.stderr, "baton lock: interrupted while waiting for the lock; the command did not run")
			return exitInterrupted
		}
		if errors.Is(err, client.ErrTimeout) {
			fmt.Fprintf(e.stderr, "baton lock: %s; the command did not run\n", notGranted(key, o.wait.d, err))
		} else {
			fmt.Fprintf(e.stderr, "baton lock: cannot get the lock: %s; the command did not run\n", strings.TrimPrefix(err.Error(), "baton: "))
		}
		return exitNotGranted
	}
	if e.ctx.Err() != nil {
		// Interrupted just as the lock was granted.
		_ = l.Release(context.Background())
		fmt.Fprintln(e.stderr, "baton lock: interrupted; the command did not run")
		return exitInterrupted
	}
	l.KeepAlive()
	status, lost := runHolding(e, l, command, o.grace)

	// Release with a context of its own: the command is over, whatever
	// interrupted it, and the lock must not linger until its lease ends.
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, client.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "baton lock: warning: %v (the lock is freed when its lease runs out)\n", err)
	}
	if lost != nil {
		fmt.Fprintf(e.stderr, "baton lock: the lock on %s was lost while the command ran: %v\n", key, lost)
		return exitLost
	}
	return status
}

// runHolding runs command while l is held and returns its exit status, and
// why the lock was lost if it was. When the lock is lost the command gets
// SIGTERM, then SIGKILL after grace.
func runHolding(e env, l *client.Lock, command []string, grace time.Duration) (status int, lost error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), "BATON_KEY="+l.Key(), "BATON_TOKEN="+strconv.FormatUint(l.Token(), 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	// When the output is not a file, Go copies it through a pipe, and a
	// process the command left in the background could hold that pipe open
	// long after the command exited; the lock must not wait for it.
	cmd.WaitDelay = time.Second
	// Signals are taken before the start, so that none slips through to
	// the default handling (which would leave the command running); one
	// that comes before the command exists is passed on once it does.
	var (
		mu      sync.Mutex
		proc    *os.Process
		waiting []os.Signal
	)
	if e.takeSignals != nil {
		restore := e.takeSignals(func(s os.Signal) {
			if s == os.Interrupt && terminalForeground() {
				return // the terminal sent it to the command as well
			}
			mu.Lock()
			defer mu.Unlock()
			if proc == nil {
				waiting = append(waiting, s)
				return
			}
			_ = proc.Signal(s)
		})
		defer restore()
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.stderr, "baton lock: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound, nil
		}
		return exitCannotRun, nil
	}
	mu.Lock()
	proc = cmd.Process
	for _, s := range waiting {
		_ = proc.Signal(s)
	}
	mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	lockDone := l.Done()
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			if err := l.Err(); err != nil && lost == nil {
				lost = err
			}
			return exitStatus(cmd.ProcessState), lost
		case <-lockDone:
			lockDone = nil
			lost = l.Err()
			fmt.Fprintf(e.stderr, "baton lock: lost the lock on %s (%v); sending SIGTERM to the command\n", l.Key(), lost)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(e.stderr, "baton lock: the command did not exit %v after SIGTERM; sending SIGKILL\n", grace)
			_ = cmd.Process.Kill()
		}
	}
}

// exitStatus is the shell's view of how a process ended: its exit code, or
// 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
