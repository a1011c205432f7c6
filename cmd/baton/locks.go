package main

// The one-shot lock commands: acquire, release, extend and query. What they
// share with lock and bench is in common.go.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/baton-dev/baton/client"
)

// --- acquire ---------------------------------------------------------------

const acquireUsage = `baton acquire: acquire a lock and print its fencing token.

Usage:
  baton acquire KEY [flags]

The lock stays held after baton exits, until baton release KEY TOKEN (or
until its lease runs out). The token is printed alone on stdout, so that
TOKEN=$(baton acquire KEY) works.

Every acquire names an owner, which baton query shows for the holder: by
default HOST:PID: and 32 random hex digits, new for every acquire. An
acquire with the owner of the grant that holds KEY gets that grant back at
once (the same token, its lease renewed to --lease from now) instead of
waiting for it: so a script that lost the answer of baton acquire --owner
OWNER (a timeout, a crash) may run it again with the same OWNER. An owner
names one holder: two that use the same one share the lock.

Flags:
  --lease DURATION   how long the lock is held unless extended or released,
                     1ms to 24h (default 10s)
  --wait DURATION    how long to wait for a lock someone else holds: 0 waits
                     forever, -1 does not wait at all (try-lock), e.g. 5s
                     (default 0)
  --owner OWNER      the owner to name, 1 to 64 bytes, no spaces or control
                     characters (default: a new random one, as above)
` + commonHelp + jsonHelp + `  --help             show this text

JSON: {"key":"K","acquired":true,"token":N,"lease_ms":N,"owner":"O"}, or
{"key":"K","acquired":false} when not granted in time.

Exit status: 0 acquired; 75 not granted within --wait (someone else holds
it); 1 failure (no server reachable, server error); 2 bad usage;
130 interrupted.
`

// leaseOpts are the flags of the commands that ask for a lease.
type leaseOpts struct {
	commonOpts
	lease time.Duration
	wait  waitFlag
	owner ownerFlag
}

// leaseFlags defines the flags of acquire (withWait, and --owner) or
// extend.
func leaseFlags(name string, o *leaseOpts, getenv func(string) string, withWait bool) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	commonFlags(fs, &o.commonOpts, getenv, true)
	fs.DurationVar(&o.lease, "lease", 10*time.Second, "")
	if withWait {
		fs.Var(&o.wait, "wait", "")
		fs.Var(&o.owner, "owner", "")
	}
	return fs
}

func runAcquire(e env, args []string) int {
	var lo leaseOpts
	fs := leaseFlags("acquire", &lo, e.getenv, true)
	pos, code, done := parseCommand(e, "acquire", acquireUsage, fs, args, 1, 1)
	if done {
		return code
	}
	key, o, lease, wait := pos[0], &lo.commonOpts, &lo.lease, lo.wait
	if err := checkLease(*lease); err != nil {
		return usageError(e, "acquire", err)
	}
	if err := checkWait(wait.d); err != nil {
		return usageError(e, "acquire", err)
	}
	c, code, ok := dial(e, "acquire", o, oneShot)
	if !ok {
		return code
	}
	defer c.Close()

	bound := time.Duration(0) // wait forever: no deadline
	switch {
	case wait.d < 0:
		bound = o.timeout
	case wait.d > 0 && o.timeout > 0:
		bound = wait.d + o.timeout
	}
	ctx, cancel := limited(e, bound)
	defer cancel()
	l, err := c.Acquire(ctx, key, *lease, wait.d, lo.owner.options()...)
	if errors.Is(err, client.ErrTimeout) && e.ctx.Err() == nil {
		if o.json {
			printJSON(e.stdout, map[string]any{"key": key, "acquired": false})
		}
		fmt.Fprintf(e.stderr, "baton acquire: %s\n", notGranted(key, wait.d, err))
		return exitNotGranted
	}
	if err != nil {
		return failure(e, "acquire", err)
	}
	if o.json {
		printJSON(e.stdout, map[string]any{"key": key, "acquired": true, "token": l.Token(), "lease_ms": lease.Milliseconds(), "owner": l.Owner()})
	} else {
		fmt.Fprintln(e.stdout, l.Token())
	}
	return exitOK
}

// --- release ---------------------------------------------------------------

const releaseUsage = `baton release: release a lock.

Usage:
  baton release KEY TOKEN [flags]
  baton release KEY [flags]

With TOKEN only that grant is released: if the lock has passed to someone
else meanwhile, nothing changes. Without TOKEN whoever holds KEY is
released: for clearing a lock left behind by a holder that died.

A release that gets no answer is retried every 200ms for up to 5s.

Flags:
` + commonHelp + jsonHelp + `  --help             show this text

JSON: {"key":"K","released":true} or {"key":"K","released":false}.

Exit status: 0 released; 3 not held (by TOKEN, or by anyone); 1 failure;
2 bad usage; 130 interrupted.
`

// plainFlags defines the flags of release and query.
func plainFlags(name string, o *commonOpts, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	commonFlags(fs, o, getenv, true)
	return fs
}

func runRelease(e env, args []string) int {
	var o commonOpts
	fs := plainFlags("release", &o, e.getenv)
	pos, code, done := parseCommand(e, "release", releaseUsage, fs, args, 1, 2)
	if done {
		return code
	}
	key := pos[0]
	var token uint64
	if len(pos) == 2 {
		t, err := parseToken(pos[1])
		if err != nil {
			return usageError(e, "release", err)
		}
		token = t
	}
	c, code, ok := dial(e, "release", &o, oneShot)
	if !ok {
		return code
	}
	defer c.Close()
	ctx, cancel := limited(e, o.timeout)
	defer cancel()
	var err error
	if token != 0 {
		err = c.Release(ctx, key, token)
	} else {
		err = c.ForceRelease(ctx, key)
	}
	if errors.Is(err, client.ErrNotHeld) {
		if o.json {
			printJSON(e.stdout, map[string]any{"key": key, "released": false})
		}
		if token != 0 {
			fmt.Fprintf(e.stderr, "baton release: %s is not held by token %d\n", key, token)
		} else {
			fmt.Fprintf(e.stderr, "baton release: %s is not held\n", key)
		}
		return exitNotHeld
	}
	if err != nil {
		return failure(e, "release", err)
	}
	if o.json {
		printJSON(e.stdout, map[string]any{"key": key, "released": true})
	} else {
		fmt.Fprintf(e.stdout, "released %s\n", key)
	}
	return exitOK
}

func parseToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, fmt.Errorf("bad token %q: want a number from 1 to 18446744073709551615", s)
	}
	return t, nil
}

// --- extend ----------------------------------------------------------------

const extendUsage = `baton extend: extend the lease of a held lock.

Usage:
  baton extend KEY TOKEN [flags]

Sets the lease of the grant with TOKEN to --lease from now.

Flags:
  --lease DURATION   the new lease, from now, 1ms to 24h (default 10s)
` + commonHelp + jsonHelp + `  --help             show this text

JSON: {"key":"K","token":N,"extended":true,"lease_ms":N} or
{"key":"K","token":N,"extended":false}.

Exit status: 0 extended; 3 not held by TOKEN any more; 1 failure; 2 bad
usage; 130 interrupted.
`

func runExtend(e env, args []string) int {
	var lo leaseOpts
	fs := leaseFlags("extend", &lo, e.getenv, false)
	o, lease := &lo.commonOpts, &lo.lease
	pos, code, done := parseCommand(e, "extend", extendUsage, fs, args, 1, 2)
	if done {
		return code
	}
	if len(pos) < 2 {
		return usageError(e, "extend", errors.New("missing TOKEN"))
	}
	key := pos[0]
	token, err := parseToken(pos[1])
	if err != nil {
		return usageError(e, "extend", err)
	}
	if err := checkLease(*lease); err != nil {
		return usageError(e, "extend", err)
	}
	c, code, ok := dial(e, "extend", o, oneShot)
	if !ok {
		return code
	}
	defer c.Close()
	ctx, cancel := limited(e, o.timeout)
	defer cancel()
	err = c.Extend(ctx, key, token, *lease)
	if errors.Is(err, client.ErrNotHeld) {
		if o.json {
			printJSON(e.stdout, map[string]any{"key": key, "token": token, "extended": false})
		}
		fmt.Fprintf(e.stderr, "baton extend: %s is not held by token %d\n", key, token)
		return exitNotHeld
	}
	if err != nil {
		return failure(e, "extend", err)
	}
	if o.json {
		printJSON(e.stdout, map[string]any{"key": key, "token": token, "extended": true, "lease_ms": lease.Milliseconds()})
	} else {
		fmt.Fprintf(e.stdout, "extended %s (token %d): lease %v from now\n", key, token, *lease)
	}
	return exitOK
}

// --- query -----------------------------------------------------------------

const queryUsage = `baton query: show who holds a key.

Usage:
  baton query KEY [flags]

Prints the holder's fencing token, its owner (the owner its acquire named:
for baton's own, HOST:PID: and random hex digits) and what is left of its
lease, or that the key is free. The answer is the committed state.

Flags:
` + commonHelp + jsonHelp + `  --help             show this text

JSON: {"key":"K","held":true,"token":N,"remaining_ms":N,"owner":"O"} (owner
"" for a grant whose acquire named none) or {"key":"K","held":false}.

Exit status: 0 answered (held or free); 1 failure; 2 bad usage;
130 interrupted.
`

func runQuery(e env, args []string) int {
	var o commonOpts
	fs := plainFlags("query", &o, e.getenv)
	pos, code, done := parseCommand(e, "query", queryUsage, fs, args, 1, 1)
	if done {
		return code
	}
	key := pos[0]
	c, code, ok := dial(e, "query", &o, oneShot)
	if !ok {
		return code
	}
	defer c.Close()
	ctx, cancel := limited(e, o.timeout)
	defer cancel()
	st, err := c.Query(ctx, key)
	if err != nil {
		return failure(e, "query", err)
	}
	printState(e.stdout, o.json, key, st)
	return exitOK
}

// printState prints what query and watch say of a key: one line of text,
// or one JSON object.
func printState(w io.Writer, asJSON bool, key string, st client.State) {
	switch {
	case asJSON && st.Held:
		printJSON(w, map[string]any{"key": key, "held": true, "token": st.Token, "remaining_ms": st.Remaining.Milliseconds(), "owner": st.Owner})
	case asJSON && st.Holders > 0:
		printJSON(w, map[string]any{"key": key, "held": false, "holders": st.Holders, "permits": st.Permits})
	case asJSON:
		printJSON(w, map[string]any{"key": key, "held": false})
	case st.Held && st.Owner != "":
		fmt.Fprintf(w, "%s: held by token %d (owner %s), %v of lease left\n", key, st.Token, st.Owner, st.Remaining)
	case st.Held:
		fmt.Fprintf(w, "%s: held by token %d, %v of lease left\n", key, st.Token, st.Remaining)
	case st.Holders > 0:
		fmt.Fprintf(w, "%s: %d of %d shared holds held\n", key, st.Holders, st.Permits)
	default:
		fmt.Fprintf(w, "%s: free\n", key)
	}
}
