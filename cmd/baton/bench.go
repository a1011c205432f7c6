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
	"github.com/baton-dev/baton/codec"
)

const benchUsage = `baton bench: drive load against baton servers over the wire protocol and
measure throughput, latency, order and (hold) memory.

Usage:
  baton bench [flags]

Workloads (a "cycle slot" is one client: --conns x --depth of them, each
running one lock cycle after the other):
  uncontended  every slot cycles over keys of its own: A key lease wait,
               then R key token once granted. Reports cycles/s, acquire
               and cycle latency, errors by kind, and checks that each
               key's tokens only grow.
  contended    every slot cycles A then R on a few shared keys (--keys,
               default 1; slot j uses key j mod keys; --depth defaults to
               1 and may not exceed --keys). Reports hand-offs/s (grants
               per second), acquire latency (including the wait in the
               queue) and hand-off latency (from sending the R that freed
               a key to reading the key's next grant), and checks FIFO
               order: no grant may overtake an acquire of the same key
               that was sent more than --fifo-slack earlier and is still
               waiting. Tokens of a key must grow across all slots.
  mixed        like uncontended, but a cycle is A, K (extend), Q (query)
               and R: a quarter of the requests each. Q must answer HELD
               with the cycle's token. Reports requests/s and the latency
               of each op.
  expiry       every slot acquires a key of its own with a short lease
               (default 200ms) and never releases it: its next acquire
               waits for the lease to run out. Reports expiries/s (grants
               of keys whose holder never released) and the expiry delay
               (from the previous grant's OK plus the lease to the next
               grant: slightly less than the server's true delay).
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
  --workload NAME    uncontended, contended, mixed, expiry or hold (default
                     uncontended)
  --via MODE         wire: speak the protocol directly, pipelining (the
                     server's capacity); client: go through the Go client
                     package, one goroutine per cycle slot making blocking
                     calls (what an application sees); uncontended and
                     contended only, closed loop or open loop with --rate,
                     --conns clients each with its own connections
                     (default wire)
  --conns N          load connections (default 16)
  --depth N          cycle slots (hold: requests in flight) per connection
                     (default 16; contended 1)
  --shape SHAPE      how a connection keeps its --depth cycles in flight.
                     window: a sliding window, each slot sending its next
                     request as soon as its last one is answered (the
                     server's capacity); batch: rounds, as a client
                     library's pipeline sends them: the --depth acquires
                     in one write, then, once all are answered, the
                     releases of those granted in one write, then the next
                     round. Batch also reports each round's latency (the
                     acquire batch from its write to its last answer, and
                     the release batch likewise: what the pipeline's
                     caller waits for); uncontended over the wire, closed
                     loop only (default window)
  --keys N           uncontended, mixed: distinct keys, split evenly over
                     the slots, at least one each (default 1000000);
                     contended: shared keys (default 1); expiry: one per
                     slot, this flag is ignored
  --lease DURATION   lease of each acquire (default 10s; expiry 200ms;
                     hold 1h)
  --wait DURATION    wait of each acquire: 0 waits forever, -1 does not wait
                     (try-lock, wait_ms -1), e.g. 500ms (default 0)
  --rate N           open loop: start N cycles per second in total, on a
                     fixed schedule spread over the connections, and measure
                     latency from each cycle's intended start (so a stall
                     counts for every cycle it delays); --depth still caps
                     the cycles in flight per connection. 0 = closed loop
                     (default 0). Not for expiry or hold.
  --duration DUR     measured time after the warm-up; hold: how long the
                     locks are kept before release (default 10s)
  --owners           every acquire carries an owner (protocol 1.1), a new
                     one per cycle, as the Go client sends: run with and
                     without to see what owners cost (--via client always
                     sends them; not for hold)
  --permits N        uncontended, contended: every acquire is one of N shared
                     holds of its key (S key N lease wait, protocol 1.4; the
                     cluster must be at cluster version 4) instead of its
                     exclusive lock: every key a semaphore of N. Contended
                     then checks what a semaphore promises instead of the
                     lock's order: never more than N holders of a key at
                     once as seen from here, every token new and greater
                     than the key's tokens read before its acquire, and no
                     acquire granted a smaller token than one sent more
                     than --fifo-slack earlier. E.g. a semaphore against
                     as many locks: --workload contended --conns 64 --keys
                     1 --permits 16, then --keys 16 without --permits.
                     0 = exclusive locks (default 0)
  --ops N            stop after N measured cycles if --duration has not
                     ended the run first; 0 = no limit (default 0)
  --warmup DURATION  run this long first without recording (default 1s;
                     hold has none)
  --fifo-slack DUR   contended: how much earlier a still-waiting acquire
                     must have been sent for a grant to count as overtaking
                     it (default 50ms: the server reads each connection when
                     its event loop gets to it)
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
  --plot FILE.svg    also draw the run as an SVG image: the rate second by
                     second, and the latency distribution by percentile
  --quiet            no progress lines (they go to stderr, one a second)
  --help             show this text

TLS and the secret (protocol 1.2), for every connection, as the lock
commands have them:
` + securityHelp + `
The first SIGINT or SIGTERM ends the run early (outstanding requests are
awaited for up to 5s, hold still releases its locks) and prints what was
measured; a second one exits at once.

Exit status: 0 done; 1 could not connect (a refused TLS handshake or
secret included), the server broke a promise the run checks (a key granted
a token not greater than before, a grant out of FIFO order, or more holders
of a key than --permits), or the run
had errors (an ERR or MOVED answer, a disconnect, a request left
unanswered: anything in the report's errors line but TIMEOUT and NOTHELD),
said in one line on stderr after the report; 2 bad flags; 130 interrupted
(after printing what was measured).
`

type benchOpts struct {
	cfg      bench.Config
	security securityOpts // made into cfg.TLS and cfg.Secret by runBench
	addr     string
	pid      int
	jsonPath string
	plotPath string
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
	fs.StringVar(&c.Via, "via", bench.ViaWire, "")
	fs.IntVar(&c.Conns, "conns", 16, "")
	fs.IntVar(&c.Depth, "depth", 16, "")
	fs.StringVar(&c.Shape, "shape", bench.ShapeWindow, "")
	fs.IntVar(&c.Keys, "keys", 1_000_000, "")
	fs.DurationVar(&c.Lease, "lease", 0, "")
	fs.Var(wait, "wait", "")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "")
	fs.Int64Var(&c.Ops, "ops", 0, "")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "")
	fs.Float64Var(&c.Rate, "rate", 0, "")
	fs.DurationVar(&c.FIFOSlack, "fifo-slack", bench.DefaultFIFOSlack, "")
	fs.IntVar(&c.Hold, "hold", 1_000_000, "")
	fs.IntVar(&c.IdleConns, "idle-conns", 0, "")
	fs.BoolVar(&c.Keep, "keep", false, "")
	fs.BoolVar(&c.Owners, "owners", false, "")
	fs.IntVar(&c.Permits, "permits", 0, "")
	fs.IntVar(&o.pid, "pid", 0, "")
	fs.DurationVar(&c.Settle, "settle", 2*time.Second, "")
	fs.StringVar(&o.jsonPath, "json", "", "")
	fs.StringVar(&o.plotPath, "plot", "", "")
	fs.BoolVar(&o.quiet, "quiet", false, "")
	securityFlags(fs, &o.security, getenv)
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.Workload == bench.WorkloadContended {
		// Many clients on one key, one cycle each: the issue's "16
		// clients on one key" is --conns 16 with these defaults.
		if !set["depth"] {
			c.Depth = 1
		}
		if !set["keys"] {
			c.Keys = 1
		}
	}
	if o.plotPath != "" && !strings.HasSuffix(strings.ToLower(o.plotPath), ".svg") {
		return o, fmt.Errorf("--plot %s: only SVG is drawn (name the file .svg)", o.plotPath)
	}
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
	// As dial does for the lock commands: a file that cannot be read is a
	// failure, not bad usage.
	if o.cfg.Secret, err = o.security.secret(); err == nil {
		o.cfg.TLS, err = o.security.tlsConfig()
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "baton bench: %v\n", err)
		return exitFailed
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
	if o.plotPath != "" {
		if err := writePlot(o.plotPath, res); err != nil {
			fmt.Fprintf(e.stderr, "baton bench: --plot: %v\n", err)
			return exitFailed
		}
	}
	if e.ctx.Err() != nil {
		// The figures are printed, but a script must not take them for a
		// complete run.
		return exitInterrupted
	}
	if res.Failed() {
		fmt.Fprintf(e.stderr, "baton bench: the server broke its promises: %d token order violations, %d FIFO order violations",
			res.TokenViolations, res.FIFOViolations)
		if res.Permits > 0 {
			fmt.Fprintf(e.stderr, ", %d grants beyond the permits", res.PermitViolations)
		}
		fmt.Fprintln(e.stderr)
		return exitFailed
	}
	if faults := res.Faults(); len(faults) > 0 {
		// Figures of a run that lost requests measure something else than
		// the server's service: a script must not take them for a result.
		hint := ""
		if _, ok := res.Errors["ERR "+codec.CodeAuth]; ok {
			hint = " (the server wants its shared secret: --auth-file or BATON_AUTH)"
		}
		fmt.Fprintf(e.stderr, "baton bench: the run had errors: %s%s\n", strings.Join(faults, ", "), hint)
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

func writePlot(path string, res *bench.Result) error {
	var b strings.Builder
	if err := bench.WritePlot(&b, res); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
