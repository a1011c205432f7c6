// Command compare drives etcd and Redis with the lock recipes people use
// instead of baton, and prints baton's figures beside theirs: it is the Go
// half of `make compare` (run.sh starts the servers and calls it).
//
// It lives in a module of its own so that baton's module does not depend on
// the etcd and Redis clients. It reuses baton's bench package for what a
// measurement is (its histograms and Result), so that a figure means the
// same thing whichever system produced it.
//
//	compare drive --system etcd|redis --endpoints LIST --workload uncontended|contended \
//	    [--conns N] [--depth N] [--shape window|batch] [--rate N] [--keys N] [--lease D] [--duration D] [--warmup D] --json FILE
//	compare ready --system etcd|redis|baton --endpoints LIST [--timeout D]
//	compare table MANIFEST
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/baton-dev/baton/bench"
)

const usage = `compare: measure etcd and Redis locks the way baton bench measures baton.

  compare drive --system etcd|redis --endpoints HOST:PORT[,...] --workload uncontended|contended
                [--conns N] [--depth N] [--shape window|batch] [--rate N] [--keys N]
                [--lease D] [--duration D] [--warmup D] --json FILE
      run one measurement and write a baton bench JSON result (etcd:
      concurrency.Mutex Lock+Unlock on a session per slot; Redis: SET NX PX
      and a compare-and-delete script; see README.md). --rate N runs open
      loop, as baton bench --rate: N lock cycles per second in total, on a
      fixed schedule spread over the connections, latency counted from each
      cycle's intended start; --depth still caps the cycles in flight per
      connection. 0 (the default) is closed loop: saturation. --shape
      names the shape of the pipelined load, as baton bench's: each driver
      has one, and refuses the other (Redis uncontended: batch, a pipeline
      of --depth SETs, then one of the releases of those granted, reported
      with round_us as baton bench --shape batch; etcd, and Redis
      contended: window).
      Empty (the default): the system's own.
  compare ready --system etcd|redis|baton --endpoints HOST:PORT[,...] [--timeout D]
      wait until the system serves (etcd: prints the leader's endpoint;
      baton: one lock cycle succeeded at the first endpoint)
  compare table MANIFEST
      print the tables and ratios of a run; each MANIFEST line is
      "section<TAB>system<TAB>result.json"
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "drive":
		err = drive(ctx, args[1:], stdout)
	case "ready":
		err = ready(ctx, args[1:], stdout)
	case "table":
		if len(args) != 2 {
			err = errors.New("table wants one manifest file")
			break
		}
		var es []entry
		if es, err = readManifest(args[1]); err == nil {
			err = writeTable(stdout, es)
		}
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// maxRate bounds --rate, as baton bench bounds its own, so that a mistyped
// flag cannot make the schedule's period round to nothing.
const maxRate = 100_000_000

func drive(ctx context.Context, args []string, stdout io.Writer) error {
	o := driveOpts{grace: 15 * time.Second}
	var endpoints, jsonPath string
	fs := flag.NewFlagSet("compare drive", flag.ContinueOnError)
	fs.StringVar(&o.system, "system", "", "etcd or redis")
	fs.StringVar(&endpoints, "endpoints", "", "host:port list")
	fs.StringVar(&o.workload, "workload", workloadUncontended, "uncontended or contended")
	fs.IntVar(&o.conns, "conns", 16, "client connections")
	fs.IntVar(&o.depth, "depth", 1, "lock cycles in flight per connection")
	fs.StringVar(&o.shape, "shape", "", "window or batch, as baton bench's; empty: the system's own (Redis uncontended: batch; else window)")
	fs.Float64Var(&o.rate, "rate", 0, "open loop: lock cycles per second over all connections (0: closed loop)")
	fs.IntVar(&o.keys, "keys", 1_000_000, "uncontended: distinct keys")
	fs.DurationVar(&o.lease, "lease", 10*time.Second, "lease (etcd: session TTL, whole seconds)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time first")
	fs.StringVar(&jsonPath, "json", "", "result file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.endpoints = splitList(endpoints)
	switch {
	case len(o.endpoints) == 0:
		return errors.New("drive: --endpoints is required")
	case o.conns < 1 || o.conns > 4096 || o.depth < 1 || o.depth > 4096:
		return errors.New("drive: --conns and --depth want 1..4096")
	case o.duration <= 0 || o.duration > time.Hour || o.warmup < 0 || o.lease < time.Second:
		return errors.New("drive: want 0 < --duration <= 1h, --warmup >= 0, --lease >= 1s")
	case o.rate < 0 || o.rate != o.rate || o.rate > maxRate:
		return fmt.Errorf("drive: --rate %v: want 0 (closed loop) up to %d cycles/s", o.rate, maxRate)
	case o.workload != workloadUncontended && o.workload != workloadContended:
		return fmt.Errorf("drive: unknown workload %q", o.workload)
	case o.workload == workloadContended && o.depth != 1:
		return errors.New("drive: contended runs one lock cycle per connection (--depth 1)")
	case o.system != "etcd" && o.system != "redis":
		return fmt.Errorf("drive: unknown system %q", o.system)
	}
	if err := checkShape(&o); err != nil {
		return err
	}
	var res *bench.Result
	var err error
	if o.system == "etcd" {
		res, err = runEtcd(ctx, &o)
	} else { // redis: the checks above refused any other
		res, err = runRedis(ctx, &o)
	}
	if err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	if jsonPath == "" {
		return nil
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonPath, append(data, '\n'), 0o644)
}

func ready(ctx context.Context, args []string, stdout io.Writer) error {
	var system, endpoints string
	var timeout time.Duration
	fs := flag.NewFlagSet("compare ready", flag.ContinueOnError)
	fs.StringVar(&system, "system", "", "etcd, redis or baton")
	fs.StringVar(&endpoints, "endpoints", "", "host:port list")
	fs.DurationVar(&timeout, "timeout", 60*time.Second, "give up after")
	if err := fs.Parse(args); err != nil {
		return err
	}
	eps := splitList(endpoints)
	if len(eps) == 0 {
		return errors.New("ready: --endpoints is required")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch system {
	case "etcd":
		leader, err := etcdLeader(ctx, eps)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, leader)
		return nil
	case "redis":
		return redisReady(ctx, eps[0])
	case "baton":
		return batonReady(ctx, eps[0])
	}
	return fmt.Errorf("ready: unknown system %q", system)
}

// batonReady waits until one lock cycle succeeds at addr: a cluster member
// answers MOVED until it leads, and only a grant proves it serves.
func batonReady(ctx context.Context, addr string) error {
	var last string
	for ctx.Err() == nil {
		res, err := bench.Run(ctx, bench.Config{Addrs: []string{addr}, Conns: 1, Depth: 1, Keys: 1,
			Workload: bench.WorkloadUncontended, Ops: 1, Duration: 2 * time.Second})
		switch {
		case err != nil:
			last = err.Error()
		case res.Cycles == 1 && len(res.Errors) == 0:
			return nil
		default:
			last = fmt.Sprintf("errors %v", res.Errors)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("baton at %s does not serve: %s", addr, last)
}
