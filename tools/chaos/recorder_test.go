package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
)

// recPipe returns a recorder, the recorded client end of a net.Pipe and its
// server end. A pipe hands each Write to the reader as it was written
// (split only by the reader's buffer), so tests choose exactly how the
// bytes arrive.
func recPipe(t *testing.T) (*Recorder, net.Conn, net.Conn) {
	t.Helper()
	rec := NewRecorder()
	cli, srv := net.Pipe()
	wc := rec.Wrap(cli)
	t.Cleanup(func() {
		_ = wc.Close()
		_ = srv.Close()
	})
	return rec, wc, srv
}

// recServe reads n request lines on srv, then writes each of answers in its own
// Write, and reports any error on the returned channel.
func recServe(srv net.Conn, n int, answers ...string) <-chan error {
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReader(srv)
		for range n {
			if _, err := br.ReadString('\n'); err != nil {
				done <- fmt.Errorf("server read: %w", err)
				return
			}
		}
		for _, a := range answers {
			if _, err := srv.Write([]byte(a)); err != nil {
				done <- fmt.Errorf("server write: %w", err)
				return
			}
		}
		done <- nil
	}()
	return done
}

// recReadLines reads from c, bufSize bytes at a time, until n LFs arrived.
func recReadLines(t *testing.T, c net.Conn, n, bufSize int) {
	t.Helper()
	buf := make([]byte, bufSize)
	for seen := 0; seen < n; {
		k, err := c.Read(buf)
		seen += bytes.Count(buf[:k], []byte{'\n'})
		if err != nil {
			t.Fatalf("client read after %d lines: %v", seen, err)
		}
	}
}

// cutEvery cuts s into pieces of size n (all of it when n is 0).
func cutEvery(s string, n int) []string {
	if n <= 0 {
		return []string{s}
	}
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// answerText renders what an op got, for comparisons.
func answerText(o Op) string {
	return string(appendAnswer(nil, &o))
}

func TestRecorderPairsOutOfOrderAnswers(t *testing.T) {
	rec, c, srv := recPipe(t)
	requests := "A a 1000 -1\nQ b\nA a 2000 5\nR c 7\nK a 1025 500\n"
	// Out of order across (op, key), in request order within each.
	done := recServe(srv, 5, "Q b FREE\nR c NOTHELD\nA a OK 1025\nK a OK\nA a TIMEOUT\n")
	before := rec.Since()
	if _, err := c.Write([]byte(requests)); err != nil {
		t.Fatal(err)
	}
	recReadLines(t, c, 5, 4096)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := rec.Since()
	rec.Finish()

	want := []struct {
		op     byte
		key    string
		lease  uint32
		answer string
	}{
		{codec.OpAcquire, "a", 1000, "OK 1025"},
		{codec.OpQuery, "b", 0, "FREE"},
		{codec.OpAcquire, "a", 2000, "TIMEOUT"},
		{codec.OpRelease, "c", 0, "NOTHELD"},
		{codec.OpExtend, "a", 500, "OK"},
	}
	h := rec.History()
	if len(h) != len(want) {
		t.Fatalf("history has %d ops, want %d: %v", len(h), len(want), h)
	}
	for i, w := range want {
		o := h[i]
		if o.Op != w.op || o.Key != w.key || o.LeaseMs != w.lease || answerText(o) != w.answer {
			t.Errorf("op %d: %s, want %c %s lease %d answered %s", i, &o, w.op, w.key, w.lease, w.answer)
		}
		if o.Conn != 1 || o.Call < before || o.Return < o.Call || o.Return > after {
			t.Errorf("op %d: conn %d, interval [%v, %v], want conn 1 within [%v, %v]", i, o.Conn, o.Call, o.Return, before, after)
		}
	}
	if h[0].WaitMs != codec.WaitNone || h[2].WaitMs != 5 || h[3].Token != 7 || h[4].Token != 1025 {
		t.Errorf("request fields not recorded: %v", h)
	}
	if p := rec.Problems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}

// TestRecorderSplitLines: requests written and answers read in pieces that
// cut lines anywhere still pair.
func TestRecorderSplitLines(t *testing.T) {
	requests := "A orders/42 10000 0\nQ orders/42\nR orders/42 1027\n"
	answers := "A orders/42 OK 1027\r\nQ orders/42 HELD 1027 9999\nR orders/42 OK\n"
	for _, size := range []int{1, 2, 3, 7, 16, 0} {
		for _, bufSize := range []int{1, 5, 4096} {
			t.Run(fmt.Sprintf("chunk%d/buf%d", size, bufSize), func(t *testing.T) {
				rec, c, srv := recPipe(t)
				done := recServe(srv, 3, cutEvery(answers, size)...)
				for _, piece := range cutEvery(requests, size) {
					if _, err := c.Write([]byte(piece)); err != nil {
						t.Fatal(err)
					}
				}
				recReadLines(t, c, 3, bufSize)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				rec.Finish()
				var got []string
				for _, o := range rec.History() {
					got = append(got, string(appendRequest(nil, &o))+" -> "+answerText(o))
				}
				want := []string{"A orders/42 10000 0 -> OK 1027", "Q orders/42 -> HELD 1027 9999", "R orders/42 1027 -> OK"}
				if !slices.Equal(got, want) {
					t.Errorf("history %q, want %q", got, want)
				}
				if p := rec.Problems(); len(p) != 0 {
					t.Errorf("problems: %v", p)
				}
			})
		}
	}
}

// TestRecorderProblems: answers that pair with nothing, or do not parse,
// are reported, and do not disturb the pairing of the others.
func TestRecorderProblems(t *testing.T) {
	tests := []struct {
		name     string
		requests string
		answers  string
		problems []string // a substring of each problem, in order
		answered []string // what each request got, in Call order
	}{
		{"a second answer", "R k 5\n", "R k OK\nR k OK\n", []string{`stray answer "R k OK"`}, []string{"OK"}},
		{"an answer nobody asked for", "Q k\n", "Q z FREE\nQ k FREE\n", []string{`stray answer "Q z FREE"`}, []string{"FREE"}},
		{"an answer to another op", "A k 100 -1\n", "R k OK\n", []string{`stray answer "R k OK"`}, []string{"unanswered"}},
		{"? - ERR", "Q k\n", "? - ERR badrequest bad op\nQ k FREE\n", []string{"names no request"}, []string{"FREE"}},
		{"an unparsable answer", "Q k\n", "Q k MAYBE\nQ k FREE\n", []string{`"Q k MAYBE" does not parse`}, []string{"FREE"}},
		{"an unparsable request", "Q k\nX k\n", "Q k FREE\n", []string{`request line "X k" does not parse`}, []string{"FREE"}},
		{"ERR answers are answers", "A k 100 0\n", "A k ERR unavailable not committed in time\n", nil, []string{"ERR unavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c, srv := recPipe(t)
			n := strings.Count(tt.requests, "\n")
			done := recServe(srv, n, tt.answers)
			if _, err := c.Write([]byte(tt.requests)); err != nil {
				t.Fatal(err)
			}
			recReadLines(t, c, strings.Count(tt.answers, "\n"), 4096)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			rec.Finish()
			p := rec.Problems()
			if len(p) != len(tt.problems) {
				t.Fatalf("problems %q, want %d", p, len(tt.problems))
			}
			for i, want := range tt.problems {
				if !strings.Contains(p[i], want) || !strings.HasPrefix(p[i], "conn 1 at ") {
					t.Errorf("problem %q, want one of conn 1 containing %q", p[i], want)
				}
			}
			var got []string
			for _, o := range rec.History() {
				got = append(got, answerText(o))
			}
			if !slices.Equal(got, tt.answered) {
				t.Errorf("answers %q, want %q", got, tt.answered)
			}
		})
	}
}

// TestRecorderUnknown: requests outstanding when their connection fails,
// or when the run ends, become unknown at that moment, and what arrives
// later is ignored.
func TestRecorderUnknown(t *testing.T) {
	tests := []struct {
		name string
		end  func(t *testing.T, rec *Recorder, c, srv net.Conn)
	}{
		{"the client closes", func(t *testing.T, rec *Recorder, c, srv net.Conn) {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"the server closes", func(t *testing.T, rec *Recorder, c, srv net.Conn) {
			_ = srv.Close()
			if _, err := c.Read(make([]byte, 64)); err != io.EOF {
				t.Fatalf("read after the server closed: %v, want EOF", err)
			}
		}},
		{"the run ends", func(t *testing.T, rec *Recorder, c, srv net.Conn) {
			rec.Finish()
			// A late answer is not recorded, nor a problem.
			go func() { _, _ = srv.Write([]byte("A k OK 2049\nA k OK 3073\n")) }()
			recReadLines(t, c, 2, 4096)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c, srv := recPipe(t)
			done := recServe(srv, 2, "Q k FREE\n")
			if _, err := c.Write([]byte("A k 1000 0\nQ k\n")); err != nil {
				t.Fatal(err)
			}
			recReadLines(t, c, 1, 4096)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// A deadline is no failure: the caller may read on.
			_ = c.SetReadDeadline(time.Now().Add(-time.Second))
			if _, err := c.Read(make([]byte, 64)); err == nil {
				t.Fatal("read past its deadline succeeded")
			}
			_ = c.SetReadDeadline(time.Time{})
			if h := rec.History(); h[0].Return != 0 {
				t.Fatalf("a read deadline ended the acquire: %s", &h[0])
			}

			before := rec.Since()
			tt.end(t, rec, c, srv)
			after := rec.Since()
			rec.Finish()
			h := rec.History()
			if len(h) != 2 {
				t.Fatalf("history %v, want 2 ops", h)
			}
			if a := h[0]; a.Answered || a.Return < before || a.Return > after {
				t.Errorf("acquire %s: want unanswered with Return in [%v, %v]", &a, before, after)
			}
			if q := h[1]; !q.Answered || q.Status != codec.StatusFree {
				t.Errorf("query %s: want FREE", &q)
			}
			if p := rec.Problems(); len(p) != 0 {
				t.Errorf("problems: %v", p)
			}
		})
	}
}

// TestRecorderConcurrent: several writers and a reader on one connection,
// while others read the recorder, under -race. The server answers every
// acquire with its lease as the token, so a request paired with another's
// answer shows.
func TestRecorderConcurrent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		srv, err := ln.Accept()
		if err != nil {
			return
		}
		defer srv.Close()
		br, bw := bufio.NewReader(srv), bufio.NewWriter(srv)
		var req codec.Request
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if err := codec.ParseRequest(bytes.TrimRight(line, "\n"), &req); err != nil {
				return
			}
			fmt.Fprintf(bw, "%c %s OK %d\n", req.Op, req.Key, req.LeaseMs)
			if br.Buffered() == 0 {
				_ = bw.Flush()
			}
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder()
	c := rec.Wrap(nc)
	defer c.Close()

	const writers, perWriter = 4, 500
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 333) // an odd size, so reads cut lines
		for seen := 0; seen < writers*perWriter; {
			n, err := c.Read(buf)
			seen += bytes.Count(buf[:n], []byte{'\n'})
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
		}
	}()
	stop := make(chan struct{})
	var watchers sync.WaitGroup
	watchers.Add(1)
	go func() {
		defer watchers.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = rec.History()
				_ = rec.Problems()
				_ = rec.Since()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b []byte
			for i := range perWriter {
				// Every writer uses the same keys: the pairing queues must
				// follow the order of the bytes on the wire.
				lease := w*perWriter + i + 1
				b = append(b[:0], "A k"...)
				b = strconv.AppendInt(b, int64(i%3), 10)
				b = append(b, ' ')
				b = strconv.AppendInt(b, int64(lease), 10)
				b = append(b, " -1\n"...)
				if _, err := c.Write(b); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-readDone
	close(stop)
	watchers.Wait()
	rec.Finish()

	h := rec.History()
	if len(h) != writers*perWriter {
		t.Fatalf("history has %d ops, want %d", len(h), writers*perWriter)
	}
	for i, o := range h {
		if !o.Answered || o.Status != codec.StatusOK || o.RespToken != uint64(o.LeaseMs) {
			t.Fatalf("op %d: %s: paired with the wrong answer", i, &o)
		}
		if i > 0 && o.Call < h[i-1].Call {
			t.Fatalf("history not in Call order at %d", i)
		}
	}
	if p := rec.Problems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}

// TestRecorderConnNumbers: connections are numbered in Wrap order.
func TestRecorderConnNumbers(t *testing.T) {
	rec := NewRecorder()
	var servers []net.Conn
	for i := range 3 {
		cli, srv := net.Pipe()
		servers = append(servers, srv)
		c := rec.Wrap(cli)
		defer c.Close()
		done := make(chan struct{})
		go func() { _, _ = io.ReadAll(io.LimitReader(srv, 4)); close(done) }()
		if _, err := fmt.Fprintf(c, "Q %d\n", i); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	rec.Finish()
	for i, o := range rec.History() {
		if o.Conn != i+1 || o.Key != strconv.Itoa(i) {
			t.Errorf("op %d: %s, want conn %d", i, &o, i+1)
		}
	}
	for _, s := range servers {
		_ = s.Close()
	}
}

// TestRecorderOwners: the owner of an acquire (protocol 1.1) and the owner
// a query shows are recorded, as copies: the bytes they were parsed from
// are reused at once.
func TestRecorderOwners(t *testing.T) {
	rec, c, srv := recPipe(t)
	done := recServe(srv, 3, "A k OK 1025\nQ k HELD 1025 999 9f86d081884c7d659a2feaa0c55ad015\nA k TIMEOUT\n")
	buf := []byte("A k 1000 -1 9f86d081884c7d659a2feaa0c55ad015\nQ k\nA k 1000 -1\n")
	if _, err := c.Write(buf); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'x' // the caller's buffer is its own again
	}
	recReadLines(t, c, 3, 5) // small reads, so the answer buffer is reused
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec.Finish()
	const owner = "9f86d081884c7d659a2feaa0c55ad015"
	h := rec.History()
	if len(h) != 3 {
		t.Fatalf("history %v, want 3 ops", h)
	}
	if h[0].Owner != owner || h[1].RespOwner != owner || h[2].Owner != "" || h[0].RespOwner != "" {
		t.Errorf("owners %q, %q (shown), %q: want %q, %q, none", h[0].Owner, h[1].RespOwner, h[2].Owner, owner, owner)
	}
	want := []string{
		"A k 1000 -1 " + owner + " -> OK 1025",
		"Q k -> HELD 1025 999 " + owner,
		"A k 1000 -1 -> TIMEOUT",
	}
	for i, o := range h {
		if got := string(appendRequest(nil, &o)) + " -> " + answerText(o); got != want[i] {
			t.Errorf("op %d: %q, want %q", i, got, want[i])
		}
	}
	if p := rec.Problems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}

// A request sent while Finish runs is either ignored or made unknown with a
// Return after its Call, never left looking outstanding (Return before
// Call), which checkHangs would report.
func TestRecorderFinishRacesASend(t *testing.T) {
	for round := range 300 {
		rec := NewRecorder()
		cli, srv := net.Pipe()
		wc := rec.Wrap(cli)
		go func() { _, _ = io.Copy(io.Discard, srv) }()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 20 {
				_, _ = fmt.Fprintf(wc, "Q k%d\n", i)
			}
		}()
		go func() {
			defer wg.Done()
			rec.Finish()
		}()
		wg.Wait()
		for _, o := range rec.History() {
			if !o.Answered && o.Return < o.Call {
				t.Fatalf("round %d: %v left outstanding by Finish (Return %v < Call %v)", round, o, o.Return, o.Call)
			}
		}
		_ = wc.Close()
		_ = srv.Close()
	}
}

// TestRecorderFailureRacesASend: a Read that failed, or a Close, reads the
// clock before it takes the recorder's lock, so a request sent meanwhile
// has its Call after the failure's time. It becomes unknown as of its
// Call, not before it (which the hang check took for outstanding).
func TestRecorderFailureRacesASend(t *testing.T) {
	for _, fail := range []struct {
		name string
		do   func(c *recConn, at time.Duration)
	}{
		{"read error", func(c *recConn, at time.Duration) { c.received(nil, io.ErrClosedPipe, at) }},
		{"close", func(c *recConn, at time.Duration) {
			c.rec.mu.Lock()
			c.abandonLocked(at) // what Close does, with the time it read first
			c.dead = true
			c.rec.mu.Unlock()
		}},
	} {
		t.Run(fail.name, func(t *testing.T) {
			rec, wc, srv := recPipe(t)
			go func() { _, _ = io.Copy(io.Discard, srv) }()
			failedAt := rec.Since()
			if _, err := fmt.Fprintf(wc, "Q k\n"); err != nil {
				t.Fatal(err)
			}
			fail.do(wc.(*recConn), failedAt)
			rec.Finish()
			h := rec.History()
			if len(h) != 1 || h[0].Answered || h[0].Return < h[0].Call {
				t.Fatalf("history %+v: want one unknown request with Return >= Call", h)
			}
			if got := checkHangs(h, time.Second); len(got) != 0 {
				t.Fatalf("hangs: %v", got)
			}
		})
	}
}
