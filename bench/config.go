package bench

import (
	"context"
	"crypto/tls"
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
	// Depth is the number of requests (hold) or lock cycles (the other
	// workloads) each connection keeps in flight. Each cycle slot acts as
	// one client: it starts its next cycle when the last one ended (with
	// Shape ShapeBatch, when the connection's round ended).
	Depth int
	// Shape is how a connection keeps its Depth cycles in flight:
	// ShapeWindow (the default when empty), a sliding window, each slot
	// sending its next request as soon as its last one is answered; or
	// ShapeBatch, rounds as a client library's pipeline makes them: the
	// Depth acquires in one write, then, once every one is answered, the
	// releases of those granted in one write, and once those are all
	// answered the next round. Batches are for the uncontended workload
	// over the wire, closed loop.
	Shape string
	// Keys is the size of the key space. Uncontended and mixed split it
	// evenly over the Conns*Depth cycle slots, at least one key per slot.
	// Contended shares it: slot j (counting over all connections) uses key
	// j mod Keys, so each key has about Conns*Depth/Keys clients; Depth
	// must not exceed Keys, so that no connection waits for a key twice.
	// Expiry gives every slot one key of its own and ignores Keys.
	Keys int
	// Workload is one of Workloads(); see the package documentation.
	Workload string
	// Lease of every acquire; 0 means 10s, 200ms for expiry and 1h for
	// hold. Rounded up to whole milliseconds.
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
	// Rate, when positive, runs open loop: cycles start at this many per
	// second in total (each connection an equal share, on a fixed
	// schedule), and their latency counts from when they should have
	// started, so that a server that falls behind shows it. Depth still
	// caps the cycles in flight per connection. Not for expiry or hold.
	Rate float64
	// Via is ViaWire (the default when empty) or ViaClient (uncontended and
	// contended only; open loop with Rate too).
	Via string
	// FIFOSlack (contended) is how much earlier an acquire that is still
	// waiting must have been sent than an acquire that is granted, for the
	// grant to count as overtaking it; 0 means DefaultFIFOSlack. See
	// package documentation.
	FIFOSlack time.Duration
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
	// Owners makes every acquire carry an owner (protocol 1.1), a new one
	// for each cycle, as the Go client sends (via client always does): the
	// cost of owners is this run against one without.
	Owners bool
	// Permits, when positive, makes every acquire one of that many shared
	// holds of its key (S, protocol 1.4) instead of the key's exclusive
	// lock (A): every key a counting semaphore of Permits. Uncontended
	// and contended only. Contended then checks what a semaphore promises
	// instead of the exclusive lock's token and FIFO order (see keyLines):
	// never more than Permits holders of a key at once, every token
	// greater than those read before its acquire was sent and issued once,
	// and an acquire sent more than FIFOSlack before another never granted
	// a larger token. With one key and Permits 16 against 16 keys without,
	// it compares a semaphore with as many exclusive locks.
	Permits int
	// TLS, when set, makes every connection speak TLS configured by it (to
	// a server's --tls-listen address), as client.WithTLS does; nil: plain
	// TCP.
	TLS *tls.Config
	// Secret, when set, opens every connection with "H <secret>" (protocol
	// 1.2), for a server started with --auth-file. A connection the server
	// refuses fails the run's start.
	Secret string
	// Progress, when set, gets a line every second.
	Progress io.Writer
}

// Workload names.
const (
	WorkloadUncontended = "uncontended"
	WorkloadContended   = "contended"
	WorkloadMixed       = "mixed"
	WorkloadExpiry      = "expiry"
	WorkloadHold        = "hold"
)

// Shapes of the pipelined load (Config.Shape).
const (
	ShapeWindow = "window"
	ShapeBatch  = "batch"
)

// DefaultFIFOSlack is Config.FIFOSlack's default. A server can only queue an
// acquire once it has read it, and it reads each connection when its event
// loop gets to it; the slack keeps a loop that is a little late from
// passing for a queue that is out of order. A server that really overtakes
// its queue does so by far more (a whole hand-off per overtaking client).
const DefaultFIFOSlack = 50 * time.Millisecond

// workloads maps a workload name to its driver.
var workloads = map[string]func(context.Context, *Config) (*Result, error){
	WorkloadUncontended: runCycles,
	WorkloadContended:   runCycles,
	WorkloadMixed:       runCycles,
	WorkloadExpiry:      runCycles,
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
	maxRate  = 100_000_000
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
	case c.Rate < 0 || c.Rate != c.Rate || c.Rate > maxRate:
		return fmt.Errorf("rate %v: want 0 (closed loop) up to %d cycles/s", c.Rate, maxRate)
	case c.FIFOSlack < 0:
		return fmt.Errorf("fifo-slack %v: must not be negative", c.FIFOSlack)
	case c.Permits < 0 || c.Permits > codec.MaxPermits:
		return fmt.Errorf("permits %d: want 1..%d shared holds per key, or 0 for exclusive locks", c.Permits, codec.MaxPermits)
	case c.Permits > 0 && c.Workload != WorkloadUncontended && c.Workload != WorkloadContended:
		return fmt.Errorf("permits: only the uncontended and contended workloads (not %s)", c.Workload)
	}
	if c.Secret != "" {
		if err := codec.CheckSecret([]byte(c.Secret)); err != nil {
			return fmt.Errorf("secret: %w", err)
		}
	}
	if c.Lease == 0 {
		switch c.Workload {
		case WorkloadHold:
			c.Lease = time.Hour
		case WorkloadExpiry:
			c.Lease = 200 * time.Millisecond
		default:
			c.Lease = 10 * time.Second
		}
	}
	if c.FIFOSlack == 0 {
		c.FIFOSlack = DefaultFIFOSlack
	}
	switch c.Via {
	case "":
		c.Via = ViaWire
	case ViaWire:
	case ViaClient:
		if c.Workload != WorkloadUncontended && c.Workload != WorkloadContended {
			return fmt.Errorf("via client: only the uncontended and contended workloads (not %s)", c.Workload)
		}
	default:
		return fmt.Errorf("via %q: want %s or %s", c.Via, ViaWire, ViaClient)
	}
	switch c.Shape {
	case "":
		c.Shape = ShapeWindow
	case ShapeWindow:
	case ShapeBatch:
		// A round waits for its slowest answer: on shared keys
		// (contended) or leases left to run out (expiry) it would
		// measure that wait, not the pipeline; a schedule (rate) has
		// nothing to pace in a round that starts when the last one
		// ended; and the Go client sends no batches of its own.
		switch {
		case c.Workload != WorkloadUncontended:
			return fmt.Errorf("shape batch: only the uncontended workload (not %s)", c.Workload)
		case c.Via != ViaWire:
			return fmt.Errorf("shape batch: only via %s (the Go client sends no batches)", ViaWire)
		case c.Rate > 0:
			return errors.New("shape batch runs closed loop: a round starts when the last one ended (no rate)")
		}
	default:
		return fmt.Errorf("shape %q: want %s or %s", c.Shape, ShapeWindow, ShapeBatch)
	}
	if ms := durationMs(c.Lease); ms < 1 || ms > codec.MaxLeaseMs {
		return fmt.Errorf("lease %v: want 1ms..24h", c.Lease)
	}
	if c.Wait > 0 && durationMs(c.Wait) > codec.MaxWaitMs {
		return fmt.Errorf("wait %v: want at most 24h", c.Wait)
	}
	switch c.Workload {
	case WorkloadUncontended, WorkloadContended, WorkloadMixed, WorkloadExpiry:
		if c.Duration == 0 {
			return errors.New("duration must be positive")
		}
		if c.Keys < 1 || c.Keys > maxKeys {
			return fmt.Errorf("keys %d: want 1..%d", c.Keys, maxKeys)
		}
		if c.Workload == WorkloadContended && c.Depth > c.Keys {
			return fmt.Errorf("contended: depth %d is more than keys %d (a connection would wait for one key twice)", c.Depth, c.Keys)
		}
		if c.Workload == WorkloadExpiry {
			if c.Rate > 0 {
				return errors.New("expiry runs closed loop: its pace is the lease (no rate)")
			}
			if c.Wait != 0 && c.Wait <= c.Lease {
				return fmt.Errorf("expiry: wait %v must be 0 (forever) or longer than the lease %v, or no acquire outlasts a lease", c.Wait, c.Lease)
			}
		}
	case WorkloadHold:
		if c.Owners {
			return errors.New("hold: no owners (they are for the lock-cycle workloads)")
		}
		if c.Rate > 0 {
			return errors.New("hold runs closed loop (no rate)")
		}
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

// acquireOp is the op of every acquire: S with Permits, else A.
func (c *Config) acquireOp() byte {
	if c.Permits > 0 {
		return codec.OpShared
	}
	return codec.OpAcquire
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
