package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Config describes one benchmark run. The zero value of a field means its
// default where one is documented.
type Config struct {
	// Addrs are the servers' client addresses; connections are spread over
	// them round-robin. A MOVED answer is counted as an error, not followed:
	// point the driver at the leader.
	Addrs []string
	// Conns is the number of load-carrying connections.
	Conns int
	// Depth is the number of requests (uncontended: lock cycles) each
	// connection keeps in flight.
	Depth int
	// Keys is the size of the uncontended key space. It is split evenly over
	// the Conns*Depth cycle slots, with at least one key per slot.
	Keys int
	// Workload is "uncontended" or "hold" (see Workloads).
	Workload string
	// Lease of every acquire; 0 means 10s for uncontended and 1h for hold.
	// Rounded up to whole milliseconds.
	Lease time.Duration
	// Wait of every acquire: 0 waits forever, a negative value does not wait
	// at all (try-lock, wait_ms -1), anything else is rounded up to whole
	// milliseconds.
	Wait time.Duration
	// Duration is how long the uncontended run is measured (after Warmup),
	// and how long hold keeps its locks before releasing them.
	Duration time.Duration
	// Ops, when positive, ends an uncontended run after that many measured
	// cycles have been attempted (and answered), if Duration does not end it
	// first.
	Ops int64
	// Warmup is run before the measured Duration; its cycles are neither
	// counted nor recorded.
	Warmup time.Duration
	// Hold is the number of distinct keys the hold workload acquires.
	Hold int
	// IdleConns is the number of extra connections the hold workload opens
	// and leaves idle.
	IdleConns int
	// Keep makes hold leave its locks held at the end (they expire with
	// their lease) instead of releasing them.
	Keep bool
	// RSS, when set, returns the server's resident set size in bytes; hold
	// calls it before acquiring, after acquiring and after opening the idle
	// connections. See ProcRSS.
	RSS func() (int64, error)
	// Settle is how long hold waits before each RSS reading, so that the
	// server is done with the last burst of work.
	Settle time.Duration
	// Progress, when set, gets a line every second.
	Progress io.Writer
}

// Workload names.
const (
	WorkloadUncontended = "uncontended"
	WorkloadHold        = "hold"
)

// workloads maps a workload name to its driver.
var workloads = map[string]func(context.Context, *Config) (*Result, error){
	WorkloadUncontended: runUncontended,
	WorkloadHold:        runHold,
}

// Workloads returns the names Run accepts, sorted.
func Workloads() []string {
	names := make([]string, 0, len(workloads))
	for n := range workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Bounds that keep a mistyped flag from exhausting the machine.
const (
	maxConns = 1 << 16
	maxDepth = 1 << 16
	maxKeys  = 1 << 31
	maxHold  = 1 << 28
)

// Validate checks c and fills in the defaults of its zero fields (Lease).
// Run calls it; a command can call it first to tell a bad setting from a
// failed run.
func (c *Config) Validate() error {
	if _, ok := workloads[c.Workload]; !ok {
		return fmt.Errorf("unknown workload %q (want one of %v)", c.Workload, Workloads())
	}
	if len(c.Addrs) == 0 {
		return errors.New("no server address")
	}
	for _, a := range c.Addrs {
		if a == "" {
			return errors.New("empty server address")
		}
	}
	switch {
	case c.Conns < 1 || c.Conns > maxConns:
		return fmt.Errorf("conns %d: want 1..%d", c.Conns, maxConns)
	case c.Depth < 1 || c.Depth > maxDepth:
		return fmt.Errorf("depth %d: want 1..%d", c.Depth, maxDepth)
	case c.Duration < 0:
		return fmt.Errorf("duration %v: must not be negative", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("warmup %v: must not be negative", c.Warmup)
	case c.Ops < 0:
		return fmt.Errorf("ops %d: must not be negative", c.Ops)
	case c.Settle < 0:
		return fmt.Errorf("settle %v: must not be negative", c.Settle)
	}
	if c.Lease == 0 {
		c.Lease = 10 * time.Second
		if c.Workload == WorkloadHold {
			c.Lease = time.Hour
		}
	}
	if ms := durationMs(c.Lease); ms < 1 || ms > codec.MaxLeaseMs {
		return fmt.Errorf("lease %v: want 1ms..24h", c.Lease)
	}
	if c.Wait > 0 && durationMs(c.Wait) > codec.MaxWaitMs {
		return fmt.Errorf("wait %v: want at most 24h", c.Wait)
	}
	switch c.Workload {
	case WorkloadUncontended:
		if c.Duration == 0 {
			return errors.New("duration must be positive")
		}
		if c.Keys < 1 || c.Keys > maxKeys {
			return fmt.Errorf("keys %d: want 1..%d", c.Keys, maxKeys)
		}
	case WorkloadHold:
		if c.Hold < 0 || c.Hold > maxHold {
			return fmt.Errorf("hold %d: want 0..%d", c.Hold, maxHold)
		}
		if c.IdleConns < 0 {
			return fmt.Errorf("idle-conns %d: must not be negative", c.IdleConns)
		}
		if c.Hold == 0 && c.IdleConns == 0 {
			return errors.New("hold: nothing to do (hold and idle-conns are both 0)")
		}
	}
	return nil
}

// leaseMs is the lease_ms field of every acquire.
func (c *Config) leaseMs() uint32 { return uint32(durationMs(c.Lease)) }

// waitMs is the wait_ms field of every acquire.
func (c *Config) waitMs() int64 {
	if c.Wait < 0 {
		return codec.WaitNone
	}
	return durationMs(c.Wait)
}

// durationMs rounds d up to whole milliseconds, so that a short wait or lease
// never becomes 0, which would mean something else on the wire.
func durationMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
