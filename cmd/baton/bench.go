package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/baton-dev/baton/bench"
)

const defaultAddr = "127.0.0.1:7700"

const benchUsage = `baton bench: drive load against baton servers over the wire protocol and
measure throughput, latency and (hold) memory.

Usage:
  baton bench [flags]

Workloads:
  uncontended  every connection keeps --depth lock cycles in flight, each on
               a key of its own: A key lease wait, then R key token once
               granted. Reports cycles/s, acquire and cycle latency, errors
               by kind, and checks that each key's tokens only grow.
  hold         acquires --hold distinct keys (pipelined over --conns with
               --depth in flight) and keeps them, opens --idle-conns idle
               connections, waits --duration, then releases everything.
               With --pid it reads the server's RSS before and after, and
               prints bytes per held lock and per idle connection.

Flags:
  --addr LIST        server client address(es), comma-separated; connections
                     are spread over them (default $BATON_ADDR, else
                     127.0.0.1:7700). MOVED answers are counted as errors,
                     not followed: point it at the leader.
  --workload NAME    uncontended or hold (default uncontended)
  --conns N          load connections (default 16)
  --depth N          requests (uncontended: lock cycles) in flight per
                     connection (default 16)
  --keys N           uncontended: distinct keys, split evenly over the
                     conns*depth cycle slots, at least one each (default 1000000)
  --lease DURATION   lease of each acquire, e.g. 10s (default 10s; 1h for hold)
  --wait DURATION    wait of each acquire: 0 waits forever, -1 does not wait
                     (try-lock, wait_ms -1), e.g. 500ms (default 0)
  --duration DUR     uncontended: measured time after the warm-up; hold: how
                     long the locks are kept before release (default 10s)
  --ops N            uncontended: stop after N measured cycles if --duration
                     has not ended the run first; 0 = no limit (default 0)
  --warmup DURATION  uncontended: run this long first without recording
                     (default 1s)
  --hold N           hold: keys to acquire and keep (default 1000000)
  --idle-conns N     hold: extra connections opened after the hold and left
                     idle (default 0)
  --keep             hold: leave the locks held at the end (they expire with
                     their lease) instead of releasing them
  --pid PID          hold: the server's process id; its VmRSS is read from
                     /proc/PID/status before the hold, after it and after
                     the idle connections are open (default 0: not read)
  --settle DURATION  hold: pause before each RSS reading (default 2s)
  --json FILE        also write the result as JSON to FILE ("-": stdout, and
                     the summary goes to stderr)
  --quiet            no progress lines (they go to stderr, one a second)
  --help             show this text

The first SIGINT or SIGTERM ends the run early (outstanding requests are
awaited for up to 5s, hold still releases its locks) and prints what was
measured; a second one exits at once.

Exit status: 0 done; 1 could not connect, or the server broke the token
order (a key granted a token not greater than before); 2 bad flags;
130 interrupted (after printing what was measured).
`

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

type benchOpts struct {
	cfg      bench.Config
	addr     string
	pid      int
	jsonPath string
	quiet    bool
}

// benchFlags defines the flags of baton bench on a new flag set, writing
// into o and wait.
func benchFlags(o *benchOpts, wait *waitFlag, getenv func(string) string) *flag.FlagSet {
	c := &o.cfg
	addr := defaultAddr
	if v := getenv("BATON_ADDR"); v != "" {
		addr = v
	}
	fs := flag.NewFlagSet("baton bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.StringVar(&o.addr, "addr", addr, "")
	fs.StringVar(&c.Workload, "workload", bench.WorkloadUncontended, "")
	fs.IntVar(&c.Conns, "conns", 16, "")
	fs.IntVar(&c.Depth, "depth", 16, "")
	fs.IntVar(&c.Keys, "keys", 1_000_000, "")
	fs.DurationVar(&c.Lease, "lease", 0, "")
	fs.Var(wait, "wait", "")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "")
	fs.Int64Var(&c.Ops, "ops", 0, "")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "")
	fs.IntVar(&c.Hold, "hold", 1_000_000, "")
	fs.IntVar(&c.IdleConns, "idle-conns", 0, "")
	fs.BoolVar(&c.Keep, "keep", false, "")
	fs.IntVar(&o.pid, "pid", 0, "")
	fs.DurationVar(&c.Settle, "settle", 2*time.Second, "")
	fs.StringVar(&o.jsonPath, "json", "", "")
	fs.BoolVar(&o.quiet, "quiet", false, "")
	return fs
}

func parseBenchFlags(args []string, getenv func(string) string) (benchOpts, error) {
	var o benchOpts
	var wait waitFlag
	c := &o.cfg
	fs := benchFlags(&o, &wait, getenv)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.Wait = wait.d
	for _, a := range strings.Split(o.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if len(c.Addrs) == 0 {
		return o, errors.New("--addr: no address")
	}
	if c.Lease < 0 {
		return o, fmt.Errorf("--lease %v: must be positive", c.Lease)
	}
	if o.pid < 0 {
		return o, fmt.Errorf("--pid %d: must be positive", o.pid)
	}
	if o.pid > 0 {
		if c.Workload != bench.WorkloadHold {
			return o, errors.New("--pid only applies to --workload hold")
		}
		c.RSS = bench.ProcRSS(o.pid)
		if _, err := c.RSS(); err != nil {
			return o, fmt.Errorf("--pid %d: %v", o.pid, err)
		}
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

func runBench(e env, args []string) int {
	o, err := parseBenchFlags(args, e.getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, benchUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "baton bench: %v (see baton bench --help)\n", err)
		return exitBadUsage
	}
	summary := e.stdout
	if o.jsonPath == "-" {
		summary = e.stderr
	}
	if !o.quiet {
		o.cfg.Progress = e.stderr
	}
	if o.cfg.Workload == bench.WorkloadHold {
		if need := uint64(o.cfg.Conns + o.cfg.IdleConns + 64); fileLimit() != 0 && fileLimit() < need {
			fmt.Fprintf(e.stderr, "baton bench: warning: open-file limit %d is below the %d sockets this run needs\n", fileLimit(), need)
		}
	}

	res, err := bench.Run(e.ctx, o.cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "baton bench: %v\n", err)
		return exitFailed
	}
	if err := res.WriteText(summary); err != nil {
		fmt.Fprintf(e.stderr, "baton bench: %v\n", err)
		return exitFailed
	}
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, e.stdout, res); err != nil {
			fmt.Fprintf(e.stderr, "baton bench: --json: %v\n", err)
			return exitFailed
		}
	}
	if e.ctx.Err() != nil {
		// The figures are printed, but a script must not take them for a
		// complete run.
		return exitInterrupted
	}
	if res.TokenViolations > 0 {
		fmt.Fprintf(e.stderr, "baton bench: %d token order violations\n", res.TokenViolations)
		return exitFailed
	}
	return exitOK
}

func writeJSON(path string, stdout io.Writer, res *bench.Result) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "-" {
		_, err = stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
