package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/bench/benchtest"
	"github.com/baton-dev/baton/codec"
)

// pacedServer is a fake server that gives a sliding window away: on each
// connection it answers the acquires one at a time, gap apart, in the
// order they came, so that a client that releases as soon as one of its
// acquires is granted sends that release while the others are still
// unanswered; releases it answers at once. Every timeoutEvery-th acquire
// of a connection (0: none) is answered TIMEOUT. Keys are never held
// against each other: it records what the client does, not a lock table.
type pacedServer struct {
	ln           net.Listener
	gap          time.Duration
	timeoutEvery int
	wg           sync.WaitGroup

	mu    sync.Mutex
	conns []*pacedConn
	token uint64
}

// pacedConn is what one connection did. The reader goroutine takes
// requests; the answerer goroutine answers the acquires.
type pacedConn struct {
	nc      net.Conn
	wmu     sync.Mutex
	pending chan []byte // acquired keys, to be answered in order

	// Under pacedServer.mu:
	unanswered int             // acquires read and not yet answered
	acquires   int             // acquires read
	answered   int             // acquires answered
	timeouts   int             // acquires answered TIMEOUT
	early      int             // releases read while an acquire of the connection was unanswered
	ungranted  int             // releases of a key whose last acquire was not granted
	held       map[string]bool // keys granted and not released
	runs       []int           // lengths of the runs of acquires read with no release between
	run        int             // the run under way
}

func startPaced(t *testing.T, gap time.Duration, timeoutEvery int) *pacedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &pacedServer{ln: ln, gap: gap, timeoutEvery: timeoutEvery}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := &pacedConn{nc: nc, pending: make(chan []byte, 1<<16), held: map[string]bool{}}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(2)
			go s.read(c)
			go s.answer(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.nc.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (c *pacedConn) write(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.nc.Write(b)
}

func (s *pacedServer) read(c *pacedConn) {
	defer s.wg.Done()
	defer close(c.pending)
	in := codec.NewLineReader(64 << 10)
	var req codec.Request
	for {
		n, err := c.nc.Read(in.Free())
		in.Filled(n)
		for {
			line, lerr := in.Next()
			if lerr != nil || line == nil {
				break
			}
			if codec.ParseRequest(line, &req) != nil {
				return
			}
			s.mu.Lock()
			switch req.Op {
			case codec.OpAcquire:
				c.unanswered++
				c.acquires++
				c.run++
				s.mu.Unlock()
				c.pending <- append([]byte(nil), req.Key...)
				continue
			case codec.OpRelease:
				if c.unanswered > 0 {
					c.early++
				}
				if c.run > 0 {
					c.runs = append(c.runs, c.run)
					c.run = 0
				}
				if !c.held[string(req.Key)] {
					c.ungranted++
				}
				delete(c.held, string(req.Key))
			}
			s.mu.Unlock()
			c.write(codec.AppendResponse(nil, &codec.Response{Op: req.Op, Key: req.Key, Status: codec.StatusOK}))
		}
		if err != nil {
			return
		}
	}
}

func (s *pacedServer) answer(c *pacedConn) {
	defer s.wg.Done()
	for key := range c.pending {
		time.Sleep(s.gap)
		resp := codec.Response{Op: codec.OpAcquire, Key: key, Status: codec.StatusOK}
		s.mu.Lock()
		// Counted as answered before the answer goes out, so that a
		// release it causes never finds it unanswered.
		c.unanswered--
		c.answered++
		if s.timeoutEvery > 0 && c.answered%s.timeoutEvery == 0 {
			resp.Status = codec.StatusTimeout
			c.timeouts++
		} else {
			s.token++
			resp.Token = s.token
			c.held[string(key)] = true
		}
		s.mu.Unlock()
		c.write(codec.AppendResponse(nil, &resp))
	}
}

// pacedTotals sums what the connections did.
type pacedTotals struct {
	acquires, timeouts, early, ungranted, held int
	// runs of acquires with no release between, all but each connection's
	// last (which a budget may cut short), and the last ones
	runs, lastRuns []int
}

func (s *pacedServer) totals() pacedTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t pacedTotals
	for _, c := range s.conns {
		t.acquires += c.acquires
		t.timeouts += c.timeouts
		t.early += c.early
		t.ungranted += c.ungranted
		t.held += len(c.held)
		runs := c.runs
		if c.run > 0 {
			runs = append(runs, c.run)
		}
		if len(runs) > 0 {
			t.runs = append(t.runs, runs[:len(runs)-1]...)
			t.lastRuns = append(t.lastRuns, runs[len(runs)-1])
		}
	}
	return t
}

// A batch sends a round's releases only once every acquire of the round
// is answered, only for the acquires granted, and reports the rounds'
// latency; the same server catches a sliding window releasing early, so
// the check is not one that anything passes.
func TestBatchShape(t *testing.T) {
	const conns, depth, ops = 2, 4, 80
	const gap = time.Millisecond
	for _, tc := range []struct {
		name         string
		shape        string
		timeoutEvery int
	}{
		{"window releases early", ShapeWindow, 0},
		{"batch", ShapeBatch, 0},
		// Every third acquire of a connection is answered TIMEOUT: never
		// a whole round of 4, so every round has releases to send.
		{"batch with timeouts", ShapeBatch, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startPaced(t, gap, tc.timeoutEvery)
			res, err := Run(context.Background(), Config{
				Addrs: []string{srv.ln.Addr().String()}, Conns: conns, Depth: depth, Keys: 1000,
				Workload: WorkloadUncontended, Shape: tc.shape, Duration: 10 * time.Second, Ops: ops,
			})
			if err != nil {
				t.Fatal(err)
			}
			tot := srv.totals()
			t.Logf("server: %+v; acquire %+v, rounds %+v", tot, res.AcquireUs, res.RoundUs)
			batch := tc.shape == ShapeBatch
			if batch == (tot.early > 0) {
				t.Fatalf("%d releases sent while an acquire of their connection was unanswered", tot.early)
			}
			if tot.ungranted != 0 || tot.held != 0 {
				t.Fatalf("%d releases of keys not granted, %d grants never released", tot.ungranted, tot.held)
			}
			// Every ticket of the budget is one acquire; a cycle is
			// counted when its release is answered.
			if tot.acquires != ops || res.Cycles != int64(ops-tot.timeouts) || res.Stop != endOps {
				t.Fatalf("%d acquires (%d TIMEOUT), %d cycles, stop %q: want %d acquires", tot.acquires, tot.timeouts, res.Cycles, res.Stop, ops)
			}
			if res.Errors[codec.StatusTimeout.String()] != int64(tot.timeouts) || len(res.Errors) > min(tot.timeouts, 1) || res.Failed() {
				t.Fatalf("errors %v, %d TIMEOUT answers sent", res.Errors, tot.timeouts)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if !batch {
				if res.RoundUs != nil || res.Shape != "" || strings.Contains(text.String(), "round") || bytes.Contains(js, []byte("round_us")) {
					t.Fatalf("a window reports rounds: shape %q, %+v\n%s", res.Shape, res.RoundUs, text.String())
				}
				return
			}
			for _, n := range tot.runs {
				if n != depth {
					t.Fatalf("runs of acquires before a release %v, last ones %v: want %d each", tot.runs, tot.lastRuns, depth)
				}
			}
			for _, n := range tot.lastRuns {
				if n > depth {
					t.Fatalf("last runs of acquires %v: want at most %d", tot.lastRuns, depth)
				}
			}
			r := res.RoundUs
			if r == nil {
				t.Fatal("no round latency")
			}
			// One round per depth tickets; a connection's last may be
			// short when the other took the rest of the budget.
			if r.Acquire.Count < ops/depth || r.Acquire.Count > ops/depth+conns || r.Release.Count != r.Acquire.Count {
				t.Errorf("%d acquire rounds, %d release rounds for %d acquires of %d per round", r.Acquire.Count, r.Release.Count, ops, depth)
			}
			// The server answers a round's acquires gap apart: the round
			// lasts depth gaps, an acquire of it half as long at the
			// median; releases are answered at once.
			if least := (depth * gap).Microseconds(); r.Acquire.P50 < least || res.AcquireUs.P50 >= r.Acquire.P50 || r.Release.P50 >= r.Acquire.P50 {
				t.Errorf("acquire round p50 %dus (want at least %dus), acquire p50 %dus, release round p50 %dus",
					r.Acquire.P50, least, res.AcquireUs.P50, r.Release.P50)
			}
			for _, want := range []string{"in rounds of 4 acquires", "acq round", "rel round"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("summary lacks %q:\n%s", want, text.String())
				}
			}
			for _, want := range []string{`"shape":"batch"`, `"round_us":{"acquire":{"count":`, `"release":{"count":`} {
				if !bytes.Contains(js, []byte(want)) {
					t.Errorf("JSON lacks %s: %s", want, js)
				}
			}
		})
	}
}

// Batches against the ordinary fake, with a warm-up and a time limit: no
// errors, every grant released, and warm-up rounds left out.
func TestBatchAgainstFake(t *testing.T) {
	srv := startFake(t, benchtest.Options{})
	var progress bytes.Buffer
	res, err := Run(context.Background(), Config{
		Addrs: []string{srv.Addr()}, Conns: 3, Depth: 8, Keys: 1000, Owners: true,
		Workload: WorkloadUncontended, Shape: ShapeBatch, Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles == 0 || len(res.Errors) != 0 || res.Failed() || res.Stop != endTime || srv.Held() != 0 {
		t.Fatalf("cycles %d, errors %v, violations %d, stop %q, held %d", res.Cycles, res.Errors, res.TokenViolations, res.Stop, srv.Held())
	}
	// Measured rounds are whole, 8 cycles each: a run that stops still
	// sends the releases of what its round was granted.
	if r := res.RoundUs; r == nil || r.Acquire.Count == 0 || res.Cycles != 8*r.Acquire.Count || r.Release.Count != r.Acquire.Count {
		t.Fatalf("cycles %d, rounds %+v", res.Cycles, res.RoundUs)
	}
	if res.AcquireUs.Count != res.Cycles || res.CycleUs.Count != res.Cycles || res.ReleaseUs == nil || res.ReleaseUs.Count != res.Cycles {
		t.Fatalf("acquire %+v, cycle %+v, release %+v for %d cycles", res.AcquireUs, res.CycleUs, res.ReleaseUs, res.Cycles)
	}
	if !strings.Contains(progress.String(), "cycles/s") {
		t.Errorf("progress: %q", progress.String())
	}
}

// Batches are for the uncontended workload over the wire, closed loop;
// anything else is refused before the run, saying why.
func TestBatchRefusedElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		says string
	}{
		{"contended", Config{Workload: WorkloadContended, Shape: ShapeBatch}, "only the uncontended workload"},
		{"mixed", Config{Workload: WorkloadMixed, Shape: ShapeBatch}, "only the uncontended workload"},
		{"expiry", Config{Workload: WorkloadExpiry, Shape: ShapeBatch}, "only the uncontended workload"},
		{"hold", Config{Workload: WorkloadHold, Shape: ShapeBatch, Hold: 10}, "only the uncontended workload"},
		{"via client", Config{Workload: WorkloadUncontended, Shape: ShapeBatch, Via: ViaClient}, "only via wire"},
		{"open loop", Config{Workload: WorkloadUncontended, Shape: ShapeBatch, Rate: 100}, "closed loop"},
		{"unknown shape", Config{Workload: WorkloadUncontended, Shape: "zigzag"}, `shape "zigzag"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Addrs, cfg.Conns, cfg.Depth, cfg.Keys, cfg.Duration = []string{"127.0.0.1:1"}, 1, 1, 1, time.Second
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%+v: error %v, want one saying %q", tc.cfg, err, tc.says)
			}
		})
	}
	for _, shape := range []string{"", ShapeWindow, ShapeBatch} {
		cfg := Config{Addrs: []string{"127.0.0.1:1"}, Conns: 1, Depth: 1, Keys: 1, Duration: time.Second,
			Workload: WorkloadUncontended, Shape: shape, Owners: true, Permits: 2}
		if err := cfg.Validate(); err != nil {
			t.Errorf("shape %q: %v", shape, err)
		}
	}
}
