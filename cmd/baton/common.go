package main

// What the commands share: the lock commands' exit statuses, flags
// (--addr, --timeout, --json, the TLS and secret flags of security.go;
// --wait, which bench has too; --http, which status and backup have) and
// command-line parsing, the checks of a lease and a wait, making the
// client, and reporting a result or a failure.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/codec"
)

// Exit statuses of the lock commands, besides exitOK, exitFailed,
// exitBadUsage and exitInterrupted.
const (
	// exitNotHeld: release or extend found the lock not held by that token.
	exitNotHeld = 3
	// exitNotGranted follows sysexits' EX_TEMPFAIL: the lock could not be
	// had (acquire: not granted within --wait; lock: not granted, or the
	// cluster could not be reached), try again later.
	exitNotGranted = 75
	// exitLost: lock's command ran but the lock was lost while it ran.
	exitLost = 76
)

const defaultTimeout = 10 * time.Second

const defaultAddr = "127.0.0.1:7700"

// defaultHTTPAddr is the --http of status and backup when neither the flag
// nor BATON_HTTP says.
const defaultHTTPAddr = "127.0.0.1:7780"

// commonOpts are the flags every lock command has.
type commonOpts struct {
	addr     string
	json     bool
	timeout  time.Duration
	security securityOpts
}

// commonFlags defines --addr, --timeout, the flags of securityFlags and,
// when withJSON, --json on fs.
func commonFlags(fs *flag.FlagSet, o *commonOpts, getenv func(string) string, withJSON bool) {
	addr := defaultAddr
	if v := getenv("BATON_ADDR"); v != "" {
		addr = v
	}
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.StringVar(&o.addr, "addr", addr, "")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "")
	securityFlags(fs, &o.security, getenv)
	if withJSON {
		fs.BoolVar(&o.json, "json", false, "")
	}
}

// commonHelp explains the flags of commonFlags, for the usage texts.
const commonHelp = `  --addr LIST        server client address(es), comma-separated: one is
                     enough (MOVED answers are followed), all of a cluster's
                     is better (default $BATON_ADDR, else 127.0.0.1:7700)
  --timeout DURATION how long to keep trying when no server answers or the
                     cluster has no leader (acquire: on top of --wait; not
                     applied to a wait of 0, which waits forever) (default 10s)
` + securityHelp

const jsonHelp = `  --json             print the result as one JSON object
`

// parseArgs parses flags that may come before, between or after the
// positional arguments (baton acquire KEY --lease 5s), and returns the
// positional ones. After "--" everything is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for range len(args) + 1 { // each round consumes at least one argument
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, nil
}

// splitAddrs turns --addr into a list.
func splitAddrs(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--addr: no address")
	}
	return out, nil
}

// checkLease and checkWait validate a lease and a wait the way the
// protocol does, so that a bad flag is a usage error and not a server
// answer.
func checkLease(lease time.Duration) error {
	if lease < time.Millisecond || lease > client.MaxLease {
		return fmt.Errorf("--lease %v: want 1ms to 24h", lease)
	}
	return nil
}

func checkWait(wait time.Duration) error {
	if wait > client.MaxWait {
		return fmt.Errorf("--wait %v: want at most 24h", wait)
	}
	return nil
}

// usageError prints a bad-usage line for cmd.
func usageError(e env, cmd string, err error) int {
	fmt.Fprintf(e.stderr, "baton %s: %v (see baton %s --help)\n", cmd, err, cmd)
	return exitBadUsage
}

// parseCommand parses args with fs and checks the positional count (the
// first positional argument, when there is one, is a KEY); help is the
// command's usage text. done is true when the caller should return code at
// once (help shown or bad usage).
func parseCommand(e env, name, help string, fs *flag.FlagSet, args []string, minPos, maxPos int) (pos []string, code int, done bool) {
	pos, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, help)
		return nil, exitOK, true
	}
	if err != nil {
		return nil, usageError(e, name, err), true
	}
	switch {
	case len(pos) < minPos:
		return nil, usageError(e, name, errors.New("missing KEY")), true
	case len(pos) > maxPos:
		return nil, usageError(e, name, fmt.Errorf("unexpected argument %q", pos[maxPos])), true
	case len(pos) > 0 && !codec.ValidKey([]byte(pos[0])):
		return nil, usageError(e, name, fmt.Errorf("bad KEY %q: want 1 to %d bytes, no spaces or control characters", pos[0], codec.MaxKey)), true
	}
	return pos, 0, false
}

// dial makes the client of one command, with the options extra on top of
// those of the flags. Its acquires name owners after ownerPrefix, unless
// told otherwise.
func dial(e env, name string, o *commonOpts, extra ...client.Option) (*client.Client, int, bool) {
	addrs, err := splitAddrs(o.addr)
	if err != nil {
		return nil, usageError(e, name, err), false
	}
	opts, err := o.security.clientOptions()
	if err != nil {
		fmt.Fprintf(e.stderr, "baton %s: %v\n", name, err)
		return nil, exitFailed, false
	}
	opts = append(opts, client.WithOwnerPrefix(ownerPrefix()))
	c, err := client.New(addrs, append(opts, extra...)...)
	if err != nil {
		return nil, usageError(e, name, err), false
	}
	return c, 0, true
}

// oneShot is the client option of a command that sends a request or two
// and exits: the client's address refresh (C -), which keeps a long-lived
// client on the cluster's current members, would only add a request.
var oneShot = client.WithFixedAddresses()

// limited is e.ctx bounded by d (no bound when d <= 0).
func limited(e env, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(e.ctx)
	}
	return context.WithTimeout(e.ctx, d)
}

// failure reports err for a command that could not do its job, and picks
// the exit status: 130 when the user interrupted it.
func failure(e env, name string, err error) int {
	if e.ctx.Err() != nil {
		fmt.Fprintf(e.stderr, "baton %s: interrupted\n", name)
		return exitInterrupted
	}
	msg := strings.TrimPrefix(err.Error(), "baton: ")
	if errors.Is(err, context.DeadlineExceeded) {
		msg += " (see --timeout)"
	}
	fmt.Fprintf(e.stderr, "baton %s: %s\n", name, msg)
	return exitFailed
}

// notGranted explains an acquire that ended with ErrTimeout.
func notGranted(key string, wait time.Duration, err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("%s was not granted before --timeout: %s", key, strings.TrimPrefix(err.Error(), "baton: "))
	case errors.Is(err, client.ErrUnavailable):
		// The wait ran out while the cluster could not serve the acquire
		// (no leader, a cluster too old for it): nobody need hold the key.
		return strings.TrimPrefix(err.Error(), "baton: ")
	case wait < 0:
		return fmt.Sprintf("%s is held by someone else", key)
	}
	return fmt.Sprintf("%s is held by someone else (not granted within %v)", key, wait)
}

func printJSON(w io.Writer, v any) {
	data, _ := json.Marshal(v) // plain maps and structs of basic types
	fmt.Fprintf(w, "%s\n", data)
}

// waitFlag is --wait: a Go duration, or -1 for try-lock.
type waitFlag struct{ d time.Duration }

func (w *waitFlag) String() string { return w.d.String() }

func (w *waitFlag) Set(s string) error {
	switch s {
	case "-1", "-1ms":
		w.d = -time.Millisecond
		return nil
	case "0":
		w.d = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 500ms, 0 (forever) or -1 (try-lock)")
	}
	if d < 0 {
		return errors.New("the only negative wait is -1 (try-lock)")
	}
	w.d = d
	return nil
}

// httpFlag defines --http, a node's --http address, on fs: by default
// $BATON_HTTP, else defaultHTTPAddr.
func httpFlag(fs *flag.FlagSet, p *string, getenv func(string) string) {
	addr := defaultHTTPAddr
	if v := getenv("BATON_HTTP"); v != "" {
		addr = v
	}
	fs.StringVar(p, "http", addr, "")
}

// nodeURL is the URL of path on the node whose --http address is addr
// (host:port, or an http:// URL).
func nodeURL(addr, path string) (string, error) {
	url := strings.TrimSpace(addr)
	if url == "" {
		return "", errors.New("--http: no address")
	}
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	return strings.TrimSuffix(url, "/") + path, nil
}
