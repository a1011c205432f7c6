// Command watchbench measures watches (protocol 1.4) on a running batond:
// the memory of one watch on each of many keys, and the time from a
// commit to the watchers' lines. It is run by tools/bench-watch.sh, which
// starts the node and reads its RSS; see BENCHMARKS.md, "Watch".
//
//	watchbench --addr 127.0.0.1:7700 --keys 100000 --conns 16 --pid PID --changes 20000
//
// It opens --conns connections and watches --keys keys spread over them
// (W, pipelined), waits for every first line, and prints the node's RSS
// before and after (from /proc/PID/status) and the bytes per watch. Then
// one client connection runs --changes acquire+release cycles, one at a
// time, on keys among the watched ones: each cycle's A and R commit one
// change each, and the time from the client reading the OK of its A (the
// commit's answer) to a watcher reading the key's HELD line is one sample;
// it prints their median and 99th percentile, and the same from the
// sending of the A. With --hold it then keeps the watches open that long,
// so that another load can run beside them.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/bench"
	"github.com/baton-dev/baton/codec"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7700", "the node's client address")
	keys := flag.Int("keys", 100000, "keys to watch, one watch each")
	conns := flag.Int("conns", 16, "connections the watches are spread over")
	pid := flag.Int("pid", 0, "the node's process id, for its RSS (0: not read)")
	changes := flag.Int("changes", 20000, "acquire+release cycles on watched keys")
	hold := flag.Duration("hold", 0, "then keep the watches open this long (for a load run beside them)")
	flag.Parse()
	if err := run(*addr, *keys, *conns, *pid, *changes, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "watchbench:", err)
		os.Exit(1)
	}
}

// watcher is one connection of watches; seen gets, per key, the time its
// latest HELD line was read.
type watcher struct {
	c    net.Conn
	r    *bufio.Reader
	mu   sync.Mutex
	held map[string]time.Time // key -> when its last HELD line arrived
	tick chan struct{}        // a HELD line arrived
}

func key(i int) string { return "watch/" + strconv.Itoa(i) }

func run(addr string, nkeys, nconns, pid, changes int, hold time.Duration) error {
	rssBefore := rss(pid)
	ws := make([]*watcher, nconns)
	for i := range ws {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		ws[i] = &watcher{c: c, r: bufio.NewReaderSize(c, 1<<16), held: map[string]time.Time{}, tick: make(chan struct{}, 1)}
	}
	// Watch every key, pipelined, then read every first line.
	start := time.Now()
	for i, w := range ws {
		var b []byte
		for k := i; k < nkeys; k += nconns {
			b = codec.AppendRequest(b, &codec.Request{Op: codec.OpWatch, Key: []byte(key(k))})
		}
		if _, err := w.c.Write(b); err != nil {
			return err
		}
	}
	for i, w := range ws {
		for k := i; k < nkeys; k += nconns {
			line, err := w.r.ReadString('\n')
			if err != nil {
				return err
			}
			if !strings.HasSuffix(line, " FREE\n") && !strings.Contains(line, " HELD ") {
				return fmt.Errorf("watch of %s answered %q", key(k), strings.TrimSpace(line))
			}
		}
	}
	took := time.Since(start)
	rssAfter := rss(pid)
	fmt.Printf("watches=%d conns=%d started_in_ms=%d", nkeys, nconns, took.Milliseconds())
	if pid != 0 {
		fmt.Printf(" rss_before=%d rss_after=%d bytes_per_watch=%d", rssBefore, rssAfter, (rssAfter-rssBefore)/int64(nkeys))
	}
	fmt.Println()

	for _, w := range ws {
		go w.read()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	cr := bufio.NewReader(c)
	fromOK := make([]time.Duration, 0, changes)
	fromSend := make([]time.Duration, 0, changes)
	for n := range changes {
		k := (n * 7919) % nkeys // spread over the watched keys and their connections
		w := ws[k%nconns]
		sent := time.Now()
		if _, err := fmt.Fprintf(c, "A %s 60000 0\n", key(k)); err != nil {
			return err
		}
		line, err := cr.ReadString('\n')
		if err != nil {
			return err
		}
		ok := time.Now()
		f := strings.Fields(line)
		if len(f) != 4 || f[2] != "OK" {
			return fmt.Errorf("acquire of %s answered %q", key(k), strings.TrimSpace(line))
		}
		at, err := w.waitHeld(key(k), sent, 5*time.Second)
		if err != nil {
			return err
		}
		fromOK = append(fromOK, max(at.Sub(ok), 0))
		fromSend = append(fromSend, at.Sub(sent))
		if _, err := fmt.Fprintf(c, "R %s %s\n", key(k), f[3]); err != nil {
			return err
		}
		if _, err := cr.ReadString('\n'); err != nil {
			return err
		}
	}
	fmt.Printf("changes=%d line_after_ok_p50_us=%d line_after_ok_p99_us=%d line_after_send_p50_us=%d line_after_send_p99_us=%d\n",
		changes, pct(fromOK, 50).Microseconds(), pct(fromOK, 99).Microseconds(), pct(fromSend, 50).Microseconds(), pct(fromSend, 99).Microseconds())
	time.Sleep(hold)
	return nil
}

// read records the arrival of every HELD line.
func (w *watcher) read() {
	for {
		line, err := w.r.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "W" && f[2] == "HELD" {
			now := time.Now()
			w.mu.Lock()
			w.held[f[1]] = now
			w.mu.Unlock()
			select {
			case w.tick <- struct{}{}:
			default:
			}
		}
	}
}

// waitHeld waits until a HELD line of key arrived after since.
func (w *watcher) waitHeld(key string, since time.Time, d time.Duration) (time.Time, error) {
	deadline := time.After(d)
	for {
		w.mu.Lock()
		at, ok := w.held[key]
		w.mu.Unlock()
		if ok && !at.Before(since) {
			return at, nil
		}
		select {
		case <-w.tick:
		case <-deadline:
			return time.Time{}, fmt.Errorf("no HELD line of %s within %v", key, d)
		}
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// rss is the resident set of process pid in bytes (baton bench's reading
// of it); 0 when pid is 0 or it cannot be read.
func rss(pid int) int64 {
	if pid == 0 {
		return 0
	}
	n, err := bench.ProcRSS(pid)()
	if err != nil {
		return 0
	}
	return n
}
