package main

import (
	"errors"
	"flag"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/engine"
)

// limitFlags registers the flags of engine.Limits, with its defaults.
func limitFlags(fs *flag.FlagSet, l *engine.Limits) {
	*l = engine.DefaultLimits()
	fs.IntVar(&l.MaxConns, "max-conns", l.MaxConns, "")
	fs.IntVar(&l.MaxWaitersPerConn, "max-waiters-per-conn", l.MaxWaitersPerConn, "")
	fs.IntVar(&l.MaxWaitersPerKey, "max-waiters-per-key", l.MaxWaitersPerKey, "")
	fs.IntVar(&l.MaxWaiters, "max-waiters", l.MaxWaiters, "")
	fs.IntVar(&l.MaxPendingQueries, "max-pending-queries", l.MaxPendingQueries, "")
	fs.IntVar(&l.MaxProposalsInFlight, "max-proposals-in-flight", l.MaxProposalsInFlight, "")
	fs.IntVar(&l.MaxPendingCommands, "max-pending-commands", l.MaxPendingCommands, "")
	fs.Var((*byteSize)(&l.MaxUnsentPerConn), "max-unsent-per-conn", "")
	fs.Var((*byteSize)(&l.MaxUnsent), "max-unsent", "")
	fs.IntVar(&l.MaxWatchesPerConn, "max-watches-per-conn", l.MaxWatchesPerConn, "")
	fs.IntVar(&l.MaxWatches, "max-watches", l.MaxWatches, "")
}

// byteSize is a flag of a number of bytes: 4194304, 4096KiB, 4MiB, 1GiB.
type byteSize int

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"B", 0}}

func (b *byteSize) String() string {
	if b == nil {
		return "0"
	}
	return strconv.Itoa(int(*b))
}

// Set implements flag.Value.
func (b *byteSize) Set(s string) error {
	num, shift := s, uint(0)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = rest, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<40)>>shift {
		return errors.New("want a number of bytes, e.g. 4MiB (units B, KiB, MiB, GiB)")
	}
	*b = byteSize(n << shift)
	return nil
}
