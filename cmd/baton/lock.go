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
	"github.com/baton-dev/baton/codec"
)

// Exit statuses of a command that did not run, as shells report them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

const electUsage = `baton elect: run a command while this candidate leads.

Usage:
  baton elect KEY --value VALUE [flags] -- COMMAND [ARGS...]

Leader election on KEY: waits until this candidate leads (candidates are
served first come, first served), then runs COMMAND as baton lock does,
with BATON_KEY and BATON_TOKEN (the leadership's fencing token). VALUE
names the candidate to everybody: it is the owner of its grant, which
baton query KEY and baton watch KEY show, so that the others know who
leads (its address, say). It must be this candidate's own: another
candidate with the same VALUE would share the leadership.

When leadership is lost (no server could be reached for a whole lease,
or an operator released the key), the command gets SIGTERM at once, and
SIGKILL --grace later: the lease is counted from when each extend was
sent, so baton's end of it comes before the server's, and the command is
told to stop before another candidate can lead. Pass BATON_TOKEN to what
the command writes to, so that a leader that was paused past its lease
cannot do harm (fencing).

Flags:
  --value VALUE      this candidate's value: 1 to 64 bytes, no spaces
  --lease DURATION   the lease kept alive while the command runs, 100ms to
                     24h (default 10s): a leader that dies is replaced
                     about this long after its last extend
  --wait DURATION    how long to wait for leadership: 0 waits forever, -1
                     does not wait, e.g. 5m (default 0)
  --grace DURATION   after leadership is lost, how long the command has to
                     exit after SIGTERM before it gets SIGKILL (default 10s)
` + commonHelp + `  --help             show this text

Signals: as baton lock (passed on to the command while it runs).

Exit status: the command's status (128+N when signal N ended it); 75 not
leader within --wait (or no server could be reached), the command did not
run; 76 leadership lost while the command ran; 126 the command could not
be started; 127 the command was not found; 2 bad usage; 130 interrupted
while waiting to lead.
`

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

With --permits N, baton holds one of N shared holds of KEY instead of its
exclusive lock (protocol 1.4; the cluster must be at cluster version 4):
up to N baton lock --permits N on KEY run their commands at once, and the
next waits, first come, first served, until one of them ends: a counting
semaphore across machines. Each holder has its own BATON_TOKEN. Every
holder and waiter of KEY must use the same N (another N is refused).
Shared holders and the exclusive lock (baton lock without --permits)
exclude each other: readers with --permits and a large N beside writers
without it make a fair read-write lock.

Flags:
  --lease DURATION   the lease kept alive while the command runs, 100ms to
                     24h (default 10s). If baton dies, the lock is freed this
                     long after the last extend.
  --permits N        hold one of N shared holds of KEY, 1 to 1000000; 0 (the
                     default) holds the exclusive lock
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
75 the lock could not be had (not granted within --wait, no server could
be reached, or the server refused it: a --permits other than that of KEY's
holders, a cluster without shared holds), the command did not run; 76 the lock was lost while the command
ran; 126 the command could not be started; 127 the command was not found;
2 bad usage; 130 interrupted while waiting for the lock.
`

type lockOpts struct {
	commonOpts
	lease time.Duration
	wait  waitFlag
	grace time.Duration
	value string // elect: the candidate's value, the owner of its acquire
	// permits is lock's --permits: one of that many shared holds of the
	// key (AcquireShared); 0 is the exclusive lock.
	permits int
}

// lockFlags defines the flags of baton lock, or of baton elect (name);
// neither has --json, since their output is the command's.
func lockFlags(name string, o *lockOpts, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	commonFlags(fs, &o.commonOpts, getenv, false)
	fs.DurationVar(&o.lease, "lease", 10*time.Second, "")
	fs.Var(&o.wait, "wait", "")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "")
	if name == "elect" {
		fs.StringVar(&o.value, "value", "", "")
	} else {
		fs.IntVar(&o.permits, "permits", 0, "")
	}
	return fs
}

func runLock(e env, args []string) int { return runHolding(e, "lock", lockUsage, args) }

func runElect(e env, args []string) int { return runHolding(e, "elect", electUsage, args) }

// runHolding is baton lock and baton elect (name): the lock, or the
// leadership, held while the command runs.
func runHolding(e env, name, usage string, args []string) int {
	var o lockOpts
	fs := lockFlags(name, &o, e.getenv)
	// The command is everything after the first "--"; flags and KEY are
	// before it.
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i+1:]
			break
		}
	}
	pos, code, done := parseCommand(e, name, usage, fs, args, 1, 1)
	if done {
		return code
	}
	key := pos[0]
	var acquireOpts []client.AcquireOption
	switch {
	case len(command) == 0:
		return usageError(e, name, errors.New("missing -- COMMAND"))
	case o.lease < minLockLease || o.lease > client.MaxLease:
		return usageError(e, name, fmt.Errorf("--lease %v: want 100ms to 24h", o.lease))
	case o.grace < 0:
		return usageError(e, name, fmt.Errorf("--grace %v: must not be negative", o.grace))
	case o.permits < 0 || o.permits > client.MaxPermits:
		return usageError(e, name, fmt.Errorf("--permits %d: want 1 to %d shared holds, or 0 for the exclusive lock", o.permits, client.MaxPermits))
	case name == "elect" && !codec.ValidOwner([]byte(o.value)):
		return usageError(e, name, fmt.Errorf("--value %q: want 1 to 64 bytes without spaces or control bytes", o.value))
	case name == "elect":
		acquireOpts = append(acquireOpts, client.WithOwner(o.value))
	}
	if err := checkWait(o.wait.d); err != nil {
		return usageError(e, name, err)
	}
	c, code, ok := dial(e, name, &o.commonOpts)
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
	var l *client.Lock
	var err error
	if o.permits > 0 {
		l, err = c.AcquireShared(actx, key, o.permits, o.lease, o.wait.d, acquireOpts...)
	} else {
		l, err = c.Acquire(actx, key, o.lease, o.wait.d, acquireOpts...)
	}
	cancel()
	if err != nil {
		if e.ctx.Err() != nil {
			fmt.Fprintf(e.stderr, "baton %s: interrupted while waiting for the lock; the command did not run\n", name)
			return exitInterrupted
		}
		if errors.Is(err, client.ErrTimeout) {
			fmt.Fprintf(e.stderr, "baton %s: %s; the command did not run\n", name, notGranted(key, o.wait.d, err))
		} else {
			fmt.Fprintf(e.stderr, "baton %s: cannot get the lock: %s; the command did not run\n", name, strings.TrimPrefix(err.Error(), "baton: "))
		}
		return exitNotGranted
	}
	if e.ctx.Err() != nil {
		// Interrupted just as the lock was granted.
		_ = l.Release(context.Background())
		fmt.Fprintf(e.stderr, "baton %s: interrupted; the command did not run\n", name)
		return exitInterrupted
	}
	l.KeepAlive()
	status, lost := runWhileHeld(e, name, l, command, o.grace)

	// Release with a context of its own: the command is over, whatever
	// interrupted it, and the lock must not linger until its lease ends.
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, client.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "baton %s: warning: %v (the lock is freed when its lease runs out)\n", name, err)
	}
	if lost != nil {
		fmt.Fprintf(e.stderr, "baton %s: the lock on %s was lost while the command ran: %v\n", name, key, lost)
		return exitLost
	}
	return status
}

// runWhileHeld runs command while l is held and returns its exit status,
// and why the lock was lost if it was. When the lock is lost the command
// gets SIGTERM, then SIGKILL after grace.
func runWhileHeld(e env, name string, l *client.Lock, command []string, grace time.Duration) (status int, lost error) {
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
		fmt.Fprintf(e.stderr, "baton %s: %v\n", name, err)
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
			fmt.Fprintf(e.stderr, "baton %s: lost the lock on %s (%v); sending SIGTERM to the command\n", name, l.Key(), lost)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(e.stderr, "baton %s: the command did not exit %v after SIGTERM; sending SIGKILL\n", name, grace)
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
