// Command stagetrace joins the trace files of a cluster of batonds built
// with -tags stagetrace (engine/stagetrace) and prints where a commit's
// time goes, stage by stage; and times the disk's own flush.
//
//	stagetrace report [-col NAME=DIR,DIR,...]... [DIR...]
//	stagetrace paths DIR
//	stagetrace flush [-dir DIR] [-n 2000] [-size 4096]
//	stagetrace now
//
// report: each DIR is one round, the trace files (stages-PID.txt) of every
// node of one run, and optionally a file "window" with the trace clock's
// start and end of the measured load ("FROM TO", nanoseconds; stagetrace
// now prints the clock). It prints, per stage, the median over the
// rounds of each round's p50 and p90, in µs, one pair of columns per
// -col (the DIRs without one form a column "all").
//
// paths: every path of one round, one per line, each event's time since
// the read in µs (the entry's index and the follower that counts first),
// to look at one request rather than at quantiles.
//
// flush: write+fdatasync of SIZE bytes at successive offsets of a file in
// DIR that was zero-filled and synced first (the disk's flush with no
// file growth, as baton's log flushes), N times; prints p50 and p90 in µs.
//
// now: the trace clock, CLOCK_MONOTONIC, in nanoseconds.
//
// tools/bench-stages.sh runs it all; BENCHMARKS.md, "Where a commit's
// time goes", has the figures.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "report":
		err = report(os.Args[2:])
	case "paths":
		err = paths(os.Args[2:])
	case "flush":
		err = flush(os.Args[2:])
	case "now":
		var ts unix.Timespec
		if err = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
			fmt.Println(ts.Nano())
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stagetrace:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: stagetrace report [-col NAME=DIR,DIR...]... [DIR...] | paths DIR | flush [-dir DIR] [-n N] [-size BYTES] | now")
	os.Exit(2)
}

// colFlags collects -col NAME=DIR,DIR,...
type colFlags []string

func (c *colFlags) String() string     { return strings.Join(*c, " ") }
func (c *colFlags) Set(s string) error { *c = append(*c, s); return nil }

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	var cols colFlags
	fs.Var(&cols, "col", "NAME=DIR,DIR,...: a column of rounds (repeatable)")
	_ = fs.Parse(args)
	specs := []string(cols)
	if fs.NArg() > 0 {
		specs = append(specs, "all="+strings.Join(fs.Args(), ","))
	}
	if len(specs) == 0 {
		return errors.New("report: no rounds")
	}
	var columns []column
	for _, spec := range specs {
		name, dirs, ok := strings.Cut(spec, "=")
		if !ok || dirs == "" {
			return fmt.Errorf("report: -col %q is not NAME=DIR[,DIR]", spec)
		}
		c := column{name: name}
		for _, dir := range strings.Split(dirs, ",") {
			r, err := readRound(dir)
			if err != nil {
				return err
			}
			c.rounds = append(c.rounds, join(r))
		}
		columns = append(columns, c)
	}
	writeReport(os.Stdout, columns)
	return nil
}

func paths(args []string) error {
	if len(args) != 1 {
		usage()
	}
	r, err := readRound(args[0])
	if err != nil {
		return err
	}
	writePaths(os.Stdout, join(r))
	return nil
}
