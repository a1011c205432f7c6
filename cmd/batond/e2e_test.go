// End-to-end tests of batond: each test starts batond as a real process on
// free 127.0.0.1 ports with a temporary data directory and checks the
// single-node rules of the wire protocol (docs/protocol.md) and the
// command-line contract over TCP and through exit codes.
package main_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// Time bounds. Lower bounds are exact: they come from the protocol. Upper
// bounds are generous, since the tests share a small, noisy machine (and
// batond may run under the race detector), but still far below the
// leases and waits that a wrong server would fall back to.
const (
	// slow bounds how long a 300 ms wait or lease may take to run out, in
	// all.
	slow = 1500 * time.Millisecond
	// answerWithin bounds an answer that needs one commit at most.
	answerWithin = 5 * time.Second
)

func startNode(t *testing.T) *harness.Node {
	t.Helper()
	return harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 4})
}

// --- protocol helpers -------------------------------------------------------

// match fails t unless line matches pattern; it returns the submatches.
func match(t testing.TB, line, pattern string) []string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("got %q, want a line matching %s", line, pattern)
	}
	return m
}

func parseU64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// grantPattern matches "A <key> OK <token>" with a valid token.
func grantPattern(key string) string {
	return `^A ` + regexp.QuoteMeta(key) + ` OK ([1-9][0-9]*)$`
}

// readGrant reads one line within d and returns the token of the grant it
// must be.
func readGrant(t testing.TB, c *harness.Conn, key string, d time.Duration) uint64 {
	t.Helper()
	line, err := c.ReadLine(d)
	if err != nil {
		t.Fatalf("waiting for the grant of %s: %v", key, err)
	}
	return parseU64(t, match(t, line, grantPattern(key))[1])
}

// acquire takes a free key (wait forever) and returns the token.
func acquire(t *testing.T, c *harness.Conn, key string, leaseMs int) uint64 {
	t.Helper()
	c.Send(fmt.Sprintf("A %s %d 0", key, leaseMs))
	return readGrant(t, c, key, answerWithin)
}

// do sends one line and fails t unless the answer is want.
func do(t *testing.T, c *harness.Conn, line, want string) {
	t.Helper()
	if got := c.Do(t, line); got != want {
		t.Fatalf("%q: got %q, want %q", line, got, want)
	}
}

// heldPattern matches "Q <key> HELD <token> <remaining_ms>".
func heldPattern(key string) string {
	return `^Q ` + regexp.QuoteMeta(key) + ` HELD ([1-9][0-9]*) ([0-9]+)$`
}

// expectHeld reads one line that must say key is held with token, and
// returns the remaining lease.
func expectHeld(t *testing.T, c *harness.Conn, key string, token uint64) (remainingMs uint64) {
	t.Helper()
	line, err := c.ReadLine(answerWithin)
	if err != nil {
		t.Fatalf("Q %s: %v", key, err)
	}
	m := match(t, line, heldPattern(key))
	if got := parseU64(t, m[1]); got != token {
		t.Fatalf("Q %s: held with token %d, want %d", key, got, token)
	}
	return parseU64(t, m[2])
}

// queryHeld queries key, which must be held with token; it returns the
// remaining lease.
func queryHeld(t *testing.T, c *harness.Conn, key string, token uint64) (remainingMs uint64) {
	t.Helper()
	c.Send("Q " + key)
	return expectHeld(t, c, key, token)
}

func queryFree(t *testing.T, c *harness.Conn, key string) {
	t.Helper()
	do(t, c, "Q "+key, "Q "+key+" FREE")
}

// query queries key and returns what the answer says.
func query(t *testing.T, c *harness.Conn, key string) (held bool, token, remainingMs uint64) {
	t.Helper()
	line := c.Do(t, "Q "+key)
	if line == "Q "+key+" FREE" {
		return false, 0, 0
	}
	m := match(t, line, heldPattern(key))
	return true, parseU64(t, m[1]), parseU64(t, m[2])
}

// eventually queries key until the answer is want, for up to d.
func eventually(t *testing.T, c *harness.Conn, key, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := c.Do(t, "Q "+key)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Q %s still answers %q after %v, want %q", key, got, d, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heldBy queries key, which must be held with token by owner, and returns
// the remaining lease.
func heldBy(t testing.TB, c *harness.Conn, key string, token uint64, owner string) (remainingMs uint64) {
	t.Helper()
	line := c.Do(t, "Q "+key)
	m := match(t, line, `^Q `+regexp.QuoteMeta(key)+` HELD ([1-9][0-9]*) ([0-9]+) (\S+)$`)
	if got := parseU64(t, m[1]); got != token || m[3] != owner {
		t.Fatalf("Q %s: held with token %d by %q, want %d by %q", key, got, m[3], token, owner)
	}
	return parseU64(t, m[2])
}

// --- the protocol on one node -----------------------------------------------

// TestProtocol checks the single-node rules of the protocol on one shared
// node. Every subtest uses its own keys; they run one after another so that
// the timing checks do not compete with the pipelining one, and so that the
// Disconnect subtests may pause the node.
func TestProtocol(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, n *harness.Node)
	}{
		{"HappyPath", testHappyPath},
		{"FIFO", testFIFO},
		{"WaitTimeout", testWaitTimeout},
		{"TryLock", testTryLock},
		{"LeaseExpiryHandOff", testLeaseExpiryHandOff},
		{"WrongToken", testWrongToken},
		{"ExtendResetsLease", testExtendResetsLease},
		{"Pipeline5000", testPipeline5000},
		{"OutOfOrderAnswers", testOutOfOrderAnswers},
		{"SameOpKeyInOrder", testSameOpKeyInOrder},
		{"Disconnect", testDisconnect},
		{"BadRequests", testBadRequests},
		{"CRLF", testCRLF},
		{"LineTooLong", testLineTooLong},
		{"WaiterLimit", testWaiterLimit},
		{"PartialLineKept", testPartialLineKept},
		{"Owners", testOwners},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, n) })
	}
}

func testHappyPath(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	c := harness.Dial(t, addr)
	const k = "happy/orders/42"
	queryFree(t, c, k)

	t1 := acquire(t, c, k, 10000)
	if rem := queryHeld(t, c, k, t1); rem == 0 || rem > 10000 {
		t.Fatalf("remaining %d ms of a 10000 ms lease", rem)
	}
	do(t, c, fmt.Sprintf("K %s %d 20000", k, t1), "K "+k+" OK")
	if rem := queryHeld(t, c, k, t1); rem <= 10000 || rem > 20000 {
		t.Fatalf("remaining %d ms after extending to 20000 ms", rem)
	}
	do(t, c, fmt.Sprintf("R %s %d", k, t1), "R "+k+" OK")
	queryFree(t, c, k)
	do(t, c, fmt.Sprintf("R %s %d", k, t1), "R "+k+" NOTHELD")

	// Every grant of the key, however acquired, gets a larger token.
	prev := t1
	for _, req := range []string{"A " + k + " 10000 0", "A " + k + " 10000 -1", "A " + k + " 10000 5000"} {
		c.Send(req)
		tok := readGrant(t, c, k, answerWithin)
		if tok <= prev {
			t.Fatalf("%q: token %d after token %d", req, tok, prev)
		}
		prev = tok
		do(t, c, "R "+k, "R "+k+" OK") // release without a token
	}
	// UTF-8 keys are fine.
	const u = "happy/ключ/鍵"
	tok := acquire(t, c, u, 10000)
	queryHeld(t, c, u, tok)
	do(t, c, fmt.Sprintf("R %s %d", u, tok), "R "+u+" OK")
}

func testFIFO(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "fifo/k"
	h := harness.Dial(t, addr)
	t0 := acquire(t, h, k, 30000)

	// Queue the waiters one at a time. Answers to different ops may come
	// back in any order, but a Q sent after the A on the same connection is
	// read only after the server has parsed that A, so once the Q's answer
	// is in, the A is surely in the queue and the next waiter is behind it.
	ws := make([]*harness.Conn, 5)
	for i := range ws {
		ws[i] = harness.Dial(t, addr)
		ws[i].Send("A "+k+" 30000 0", "Q "+k)
		expectHeld(t, ws[i], k, t0)
	}
	do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")

	prev := t0
	for i, w := range ws {
		tok := readGrant(t, w, k, answerWithin)
		if tok <= prev {
			t.Fatalf("waiter %d: token %d after token %d", i, tok, prev)
		}
		for j, later := range ws[i+1:] {
			if j == 0 {
				later.ExpectNothing(t, 100*time.Millisecond)
			} else {
				later.ExpectNothing(t, time.Millisecond)
			}
		}
		queryHeld(t, h, k, tok)
		do(t, w, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
		prev = tok
	}
	queryFree(t, h, k)
}

func testWaitTimeout(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "timeout/k"
	h := harness.Dial(t, addr)
	t0 := acquire(t, h, k, 10000)

	w := harness.Dial(t, addr)
	start := time.Now()
	w.Send("A " + k + " 10000 300")
	line, err := w.ReadLine(answerWithin)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("no answer to a 300 ms wait: %v", err)
	}
	if line != "A "+k+" TIMEOUT" {
		t.Fatalf("got %q, want TIMEOUT", line)
	}
	if elapsed < 300*time.Millisecond || elapsed > slow {
		t.Fatalf("TIMEOUT after %v, want 300ms..%v", elapsed, slow)
	}

	// The timed-out waiter holds nothing and is no longer queued.
	queryHeld(t, w, k, t0)
	do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
	queryFree(t, w, k)
	w.ExpectNothing(t, 200*time.Millisecond)
	queryFree(t, w, k)
}

func testTryLock(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "try/held"
	h := harness.Dial(t, addr)
	t0 := acquire(t, h, k, 10000)

	w := harness.Dial(t, addr)
	start := time.Now()
	w.Send("A " + k + " 10000 -1")
	line, err := w.ReadLine(answerWithin)
	elapsed := time.Since(start)
	if err != nil || line != "A "+k+" TIMEOUT" {
		t.Fatalf("try-lock of a held key: %q, %v; want TIMEOUT", line, err)
	}
	if elapsed > 200*time.Millisecond {
		t.Fatalf("try-lock of a held key answered after %v, want at once", elapsed)
	}
	// It did not queue: releasing the key leaves it free.
	do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
	queryFree(t, h, k)
	w.ExpectNothing(t, 100*time.Millisecond)

	const f = "try/free"
	w.Send("A " + f + " 10000 -1")
	tok := readGrant(t, w, f, answerWithin)
	queryHeld(t, w, f, tok)
	do(t, w, fmt.Sprintf("R %s %d", f, tok), "R "+f+" OK")
}

func testLeaseExpiryHandOff(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "lease/k"
	h := harness.Dial(t, addr)
	w := harness.Dial(t, addr)

	sent := time.Now()
	h.Send("A " + k + " 300 0")
	t1 := readGrant(t, h, k, answerWithin)
	granted := time.Now()
	w.Send("A " + k + " 10000 0")
	t2 := readGrant(t, w, k, answerWithin)
	handedOff := time.Now()

	// The lease starts when the grant takes effect, after the request was
	// sent: the hand-off cannot come sooner than 300 ms after that.
	if d := handedOff.Sub(sent); d < 300*time.Millisecond {
		t.Fatalf("lock handed off %v after the 300 ms lease was asked for", d)
	}
	if d := handedOff.Sub(granted); d > slow {
		t.Fatalf("lock handed off %v after the 300 ms grant, want within %v", d, slow)
	}
	if t2 <= t1 {
		t.Fatalf("hand-off token %d after token %d", t2, t1)
	}
	// The expired holder's token is worthless.
	do(t, h, fmt.Sprintf("R %s %d", k, t1), "R "+k+" NOTHELD")
	do(t, h, fmt.Sprintf("K %s %d 1000", k, t1), "K "+k+" NOTHELD")
	queryHeld(t, h, k, t2)
	do(t, w, fmt.Sprintf("R %s %d", k, t2), "R "+k+" OK")
}

func testWrongToken(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "wrong/k"
	c := harness.Dial(t, addr)
	t1 := acquire(t, c, k, 10000)

	for _, bad := range []uint64{t1 + 1, t1 + 1000, 18446744073709551615} {
		do(t, c, fmt.Sprintf("R %s %d", k, bad), "R "+k+" NOTHELD")
		queryHeld(t, c, k, t1)
		do(t, c, fmt.Sprintf("K %s %d 5000", k, bad), "K "+k+" NOTHELD")
		// A wrong extend must not have shortened the 10 s lease to 5 s.
		if rem := queryHeld(t, c, k, t1); rem <= 5000 {
			t.Fatalf("remaining %d ms after an extend with a wrong token", rem)
		}
	}
	do(t, c, "R "+k, "R "+k+" OK") // without a token: whoever holds it
	queryFree(t, c, k)
	do(t, c, "R "+k, "R "+k+" NOTHELD")
	do(t, c, fmt.Sprintf("R %s %d", k, t1), "R "+k+" NOTHELD")
	do(t, c, fmt.Sprintf("K %s %d 5000", k, t1), "K "+k+" NOTHELD")
	queryFree(t, c, k)
	do(t, c, "R wrong/never-held", "R wrong/never-held NOTHELD")
}

func testExtendResetsLease(t *testing.T, n *harness.Node) {
	const k = "extend/k"
	const lease = 2000 * time.Millisecond
	c := harness.Dial(t, n.ClientAddr)
	// Every bound below follows from when requests were sent and answers
	// read: a lease starts after its request was sent and before its answer
	// was read. A stall of the test machine can make an attempt prove
	// nothing (not a failure); then it is tried again.
	for attempt := 1; attempt <= 3; attempt++ {
		if testExtendOnce(t, c, k, lease) {
			return
		}
		t.Logf("attempt %d inconclusive: the machine stalled too long", attempt)
		c.Do(t, "R "+k) // whatever the state, start again from a free key
	}
	t.Skip("the machine is too slow to judge lease timing")
}

// testExtendOnce acquires k with lease, extends it 60% of the way in and
// checks that the key outlives the original lease. It returns false when
// stalls made the run inconclusive.
func testExtendOnce(t *testing.T, c *harness.Conn, k string, lease time.Duration) bool {
	ms := lease.Milliseconds()
	sentA := time.Now()
	tok := acquire(t, c, k, int(ms))
	gotA := time.Now()

	time.Sleep(lease * 6 / 10)
	sentQ := time.Now()
	held, tok1, rem1 := query(t, c, k)
	gotQ := time.Now()
	switch {
	case !held && gotQ.Sub(sentA) < lease:
		t.Fatalf("the key was free %v after a %v lease was asked for", gotQ.Sub(sentA), lease)
	case !held:
		return false
	case tok1 != tok:
		t.Fatalf("held with token %d, want %d", tok1, tok)
	}
	// The lease ends by gotA+lease and the query was answered after sentQ.
	if limit := (lease - sentQ.Sub(gotA)).Milliseconds() + 20; int64(rem1) > limit {
		t.Fatalf("remaining %d ms, %v into a %v lease", rem1, sentQ.Sub(gotA), lease)
	}

	sentK := time.Now()
	ans := c.Do(t, fmt.Sprintf("K %s %d %d", k, tok, ms))
	gotK := time.Now()
	switch {
	case ans == "K "+k+" OK":
	case ans == "K "+k+" NOTHELD" && gotK.Sub(sentA) >= lease:
		return false
	default:
		t.Fatalf("extend %v into a %v lease: got %q, want K %s OK", sentK.Sub(gotA), lease, ans, k)
	}

	// The new lease ends no sooner than sentK+lease.
	held, tok2, rem2 := query(t, c, k)
	gotQ2 := time.Now()
	if gotQ2.Sub(sentK) >= lease {
		return false
	}
	if !held || tok2 != tok {
		t.Fatalf("right after the extend: held %v with token %d, want token %d", held, tok2, tok)
	}
	if low := (lease - gotQ2.Sub(sentK)).Milliseconds() - 20; int64(rem2) < low || int64(rem2) > ms {
		t.Fatalf("remaining %d ms right after extending to %d ms, want %d..%d", rem2, ms, low, ms)
	}

	// Past the end of the original lease, the key is still held.
	time.Sleep(time.Until(gotA.Add(lease + 100*time.Millisecond)))
	held, tok3, _ := query(t, c, k)
	if time.Since(sentK) >= lease {
		return false
	}
	if !held || tok3 != tok {
		t.Fatalf("%v after the grant, %v after extending it to %v: held %v with token %d, want token %d",
			time.Since(gotA), time.Since(sentK), lease, held, tok3, tok)
	}
	do(t, c, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
	return true
}

// pipeline sends n request lines, line(0) to line(n-1), in one write and
// returns the n answers. The write runs on a goroutine of its own, so that a
// pipeline larger than the socket buffers cannot deadlock with the answers
// piling up unread.
func pipeline(t *testing.T, c *harness.Conn, n int, line func(i int) string) []string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		b.WriteString(line(i))
		b.WriteByte('\n')
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte(b.String()))
		errc <- err
	}()
	lines, err := c.ReadLines(n, 60*time.Second)
	if err != nil {
		t.Fatalf("reading %d answers: %v", n, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("writing the pipeline: %v", err)
	}
	return lines
}

func testPipeline5000(t *testing.T, node *harness.Node) {
	const n = 5000
	c := harness.Dial(t, node.ClientAddr)

	lines := pipeline(t, c, n, func(i int) string { return fmt.Sprintf("A pipe/%d 30000 0", i) })
	re := regexp.MustCompile(`^A pipe/([0-9]+) OK ([1-9][0-9]*)$`)
	tokens := make([]uint64, n)
	seen := make(map[uint64]int, n)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("got %q, want A pipe/<i> OK <token>", l)
		}
		i, err := strconv.Atoi(m[1])
		if err != nil || i >= n || tokens[i] != 0 {
			t.Fatalf("unexpected or repeated answer %q", l)
		}
		tokens[i] = parseU64(t, m[2])
		if j, dup := seen[tokens[i]]; dup {
			t.Fatalf("token %d granted to pipe/%d and pipe/%d", tokens[i], j, i)
		}
		seen[tokens[i]] = i
	}

	lines = pipeline(t, c, n, func(i int) string { return fmt.Sprintf("R pipe/%d %d", i, tokens[i]) })
	released := make([]bool, n)
	re = regexp.MustCompile(`^R pipe/([0-9]+) OK$`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("got %q, want R pipe/<i> OK", l)
		}
		i, _ := strconv.Atoi(m[1])
		if i >= n || released[i] {
			t.Fatalf("unexpected or repeated answer %q", l)
		}
		released[i] = true
	}
	queryFree(t, c, "pipe/0")
	queryFree(t, c, fmt.Sprintf("pipe/%d", n-1))
}

func testOutOfOrderAnswers(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const held, other, free = "ooo/held", "ooo/other", "ooo/free"
	h := harness.Dial(t, addr)
	t0 := acquire(t, h, held, 30000)

	c := harness.Dial(t, addr)
	c.Send("A "+held+" 30000 0", "Q "+other, "A "+free+" 30000 0")
	lines, err := c.ReadLines(2, answerWithin)
	if err != nil {
		t.Fatalf("the answers after a waiting acquire were held back: %v (got %q)", err, lines)
	}
	sort.Strings(lines) // "A ..." before "Q ..."
	freeTok := parseU64(t, match(t, lines[0], grantPattern(free))[1])
	if lines[1] != "Q "+other+" FREE" {
		t.Fatalf("got %q, want Q %s FREE", lines[1], other)
	}
	c.ExpectNothing(t, 100*time.Millisecond) // the first acquire still waits

	do(t, h, fmt.Sprintf("R %s %d", held, t0), "R "+held+" OK")
	tok := readGrant(t, c, held, answerWithin)
	if tok <= t0 {
		t.Fatalf("token %d after token %d", tok, t0)
	}
	do(t, c, fmt.Sprintf("R %s %d", held, tok), "R "+held+" OK")
	do(t, c, fmt.Sprintf("R %s %d", free, freeTok), "R "+free+" OK")
}

func testSameOpKeyInOrder(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "order/k"
	c := harness.Dial(t, addr)

	// Two releases: the first frees the key, the second finds it free.
	acquire(t, c, k, 30000)
	c.Send("R "+k, "R "+k)
	c.Expect(t, "R "+k+" OK")
	c.Expect(t, "R "+k+" NOTHELD")

	// A wrong token, then the right one.
	tok := acquire(t, c, k, 30000)
	c.Send(fmt.Sprintf("R %s %d", k, tok+1), fmt.Sprintf("R %s %d", k, tok))
	c.Expect(t, "R "+k+" NOTHELD")
	c.Expect(t, "R "+k+" OK")

	// Two acquires of a free key: the first is granted, so the second, a
	// try-lock, fails.
	c.Send("A "+k+" 30000 0", "A "+k+" 30000 -1")
	tok = readGrant(t, c, k, answerWithin)
	c.Expect(t, "A "+k+" TIMEOUT")
	do(t, c, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")

	// Two acquires that both wait: they are granted in the order sent, the
	// first with the smaller token.
	h := harness.Dial(t, addr)
	t0 := acquire(t, h, k, 30000)
	c.Send("A "+k+" 30000 0", "A "+k+" 30000 0", "Q "+k)
	expectHeld(t, c, k, t0)
	do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
	first := readGrant(t, c, k, answerWithin)
	c.ExpectNothing(t, 100*time.Millisecond)
	if first <= t0 {
		t.Fatalf("token %d after token %d", first, t0)
	}
	// The release and the second grant are different ops: either may come
	// first.
	c.Send(fmt.Sprintf("R %s %d", k, first))
	lines, err := c.ReadLines(2, answerWithin)
	if err != nil {
		t.Fatalf("after releasing the first grant: %v (got %q)", err, lines)
	}
	sort.Strings(lines)
	second := parseU64(t, match(t, lines[0], grantPattern(k))[1])
	if lines[1] != "R "+k+" OK" {
		t.Fatalf("got %q, want R %s OK", lines[1], k)
	}
	if second <= first {
		t.Fatalf("second grant token %d, first %d", second, first)
	}
	do(t, c, fmt.Sprintf("R %s %d", k, second), "R "+k+" OK")
}

func testDisconnect(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	t.Run("NextLiveWaiterGetsIt", func(t *testing.T) {
		const k = "disc/next"
		h := harness.Dial(t, addr)
		t0 := acquire(t, h, k, 30000)
		gone := harness.Dial(t, addr)
		gone.Send("A "+k+" 30000 0", "Q "+k)
		expectHeld(t, gone, k, t0)
		live := harness.Dial(t, addr)
		live.Send("A "+k+" 30000 0", "Q "+k)
		expectHeld(t, live, k, t0)
		gone.Close()

		do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
		tok := readGrant(t, live, k, answerWithin)
		if tok <= t0 {
			t.Fatalf("token %d after token %d", tok, t0)
		}
		queryHeld(t, h, k, tok)
		do(t, live, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
	})

	t.Run("NoWaiterLeft", func(t *testing.T) {
		const k = "disc/none"
		h := harness.Dial(t, addr)
		t0 := acquire(t, h, k, 30000)
		gone := harness.Dial(t, addr)
		gone.Send("A "+k+" 30000 0", "Q "+k)
		expectHeld(t, gone, k, t0)
		gone.Close()
		do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
		// A grant made to the abandoned acquire is released at once.
		eventually(t, h, k, "Q "+k+" FREE", time.Second)
	})

	// Whether the server sees a waiter's close before or after the release
	// decides whether it skips that waiter or grants it the lock and must
	// release that grant at once. With the node paused while both happen,
	// it sees them together, in either order; testAbandoned runs 20 rounds
	// so that both orders are likely to come up.
	t.Run("AbandonedGrantPassesOn", func(t *testing.T) { testAbandoned(t, n, true) })
	t.Run("AbandonedGrantReleased", func(t *testing.T) { testAbandoned(t, n, false) })

	t.Run("HolderKeepsLock", func(t *testing.T) {
		// Locks are not tied to connections.
		const k = "disc/holder"
		h := harness.Dial(t, addr)
		c := harness.Dial(t, addr)
		tok := acquire(t, c, k, 30000)
		c.Close()
		time.Sleep(300 * time.Millisecond)
		queryHeld(t, h, k, tok)
		do(t, h, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
	})
}

// testAbandoned queues a waiter behind a holder (and, withLive, a second
// waiter behind it), then, with the node paused, releases the key and
// closes the first waiter's connection. The lock must end with the live
// waiter, or free.
func testAbandoned(t *testing.T, n *harness.Node, withLive bool) {
	for i := range 20 {
		k := fmt.Sprintf("disc/abandoned/%v/%d", withLive, i)
		h := harness.Dial(t, n.ClientAddr)
		t0 := acquire(t, h, k, 30000)
		gone := harness.Dial(t, n.ClientAddr)
		gone.Send("A "+k+" 30000 0", "Q "+k)
		expectHeld(t, gone, k, t0)
		var live *harness.Conn
		if withLive {
			live = harness.Dial(t, n.ClientAddr)
			live.Send("A "+k+" 30000 0", "Q "+k)
			expectHeld(t, live, k, t0)
		}

		n.Pause()
		h.Send(fmt.Sprintf("R %s %d", k, t0))
		gone.Close()
		n.Resume()
		h.Expect(t, "R "+k+" OK")

		if !withLive {
			eventually(t, h, k, "Q "+k+" FREE", time.Second)
			continue
		}
		line, err := live.ReadLine(answerWithin)
		if err != nil {
			t.Fatalf("round %d: the live waiter got nothing in %v (%v); the key answers %q",
				i, answerWithin, err, h.Do(t, "Q "+k))
		}
		tok := parseU64(t, match(t, line, grantPattern(k))[1])
		if tok <= t0 {
			t.Fatalf("token %d after token %d", tok, t0)
		}
		queryHeld(t, h, k, tok)
		do(t, live, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
	}
}

// testPartialLineKept leaves half a request in the server's buffer while the
// answer to an earlier request wakes the connection up: the half must wait
// for its other half, not be dropped.
func testPartialLineKept(t *testing.T, n *harness.Node) {
	c := harness.Dial(t, n.ClientAddr)
	for i := range 20 {
		k := fmt.Sprintf("partial/%d", i)
		// The second request without its end.
		if _, err := c.Write([]byte("A " + k + "/a 10000 0\nA " + k + "/b 100")); err != nil {
			t.Fatal(err)
		}
		readGrant(t, c, k+"/a", answerWithin) // its answer came by a wake-up
		time.Sleep(5 * time.Millisecond)
		if _, err := c.Write([]byte("00 0\n")); err != nil {
			t.Fatal(err)
		}
		readGrant(t, c, k+"/b", answerWithin)
	}
}

// testWaiterLimit queues one more acquire on one connection than the server
// keeps (100,000): that one is answered ERR overloaded at once, the others
// keep waiting, and closing the connection abandons them all.
func testWaiterLimit(t *testing.T, n *harness.Node) {
	const k, limit = "limit/k", 100_000
	h := harness.Dial(t, n.ClientAddr)
	t0 := acquire(t, h, k, 60000)
	c := harness.Dial(t, n.ClientAddr)
	var b strings.Builder
	for range limit + 1 {
		b.WriteString("A " + k + " 60000 0\n")
	}
	b.WriteString("Q " + k)
	c.Send(b.String())
	line, err := c.ReadLine(10 * time.Second)
	if err != nil || !strings.HasPrefix(line, "A "+k+" ERR overloaded ") {
		t.Fatalf("acquire %d answered %q (%v), want ERR overloaded", limit+1, line, err)
	}
	expectHeld(t, c, k, t0)
	c.Close()
	do(t, h, fmt.Sprintf("R %s %d", k, t0), "R "+k+" OK")
	eventually(t, h, k, "Q "+k+" FREE", 5*time.Second)
}

func testBadRequests(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const q = "? -"
	long := strings.Repeat("k", 251)
	for _, tc := range []struct {
		name, line string
		echo       string // how the answer starts before " ERR badrequest"
	}{
		{"unknown op", "X br/k", q},
		{"lowercase op", "a br/k 1000 0", q},
		{"lowercase query", "q br/k", q},
		{"two-letter op", "AA br/k 1000 0", q},
		{"control byte op", "\x01 br/k", q},
		{"empty line", "", q},
		{"only spaces", "   ", q},
		{"op without key", "A", q},
		{"query without key", "Q", q},
		{"release without key", "R", q},
		{"acquire missing lease", "A br/k", "A br/k"},
		{"acquire missing wait", "A br/k 1000", "A br/k"},
		{"extend missing token", "K br/k", "K br/k"},
		{"extend missing lease", "K br/k 5", "K br/k"},
		{"query extra field", "Q br/k x", "Q br/k"},
		{"acquire extra field", "A br/k 1000 0 owner extra", "A br/k"},
		{"release extra field", "R br/k 5 5", "R br/k"},
		{"extend extra field", "K br/k 5 1000 1", "K br/k"},
		{"lease not numeric", "A br/k abc 0", "A br/k"},
		{"lease fraction", "A br/k 1.5 0", "A br/k"},
		{"lease negative", "A br/k -5 0", "A br/k"},
		{"lease hex", "A br/k 0x10 0", "A br/k"},
		{"wait not numeric", "A br/k 1000 x", "A br/k"},
		{"wait with tab", "A br/k 1000\t0", "A br/k"},
		{"release token not numeric", "R br/k abc", "R br/k"},
		{"extend token not numeric", "K br/k abc 1000", "K br/k"},
		{"extend lease not numeric", "K br/k 5 abc", "K br/k"},
		{"lease 0", "A br/k 0 0", "A br/k"},
		{"lease above max", "A br/k 86400001 0", "A br/k"},
		{"lease overflows u64", "A br/k 99999999999999999999999 0", "A br/k"},
		{"extend lease 0", "K br/k 5 0", "K br/k"},
		{"extend lease above max", "K br/k 5 86400001", "K br/k"},
		{"wait above max", "A br/k 1000 86400001", "A br/k"},
		{"wait -2", "A br/k 1000 -2", "A br/k"},
		{"release token 0", "R br/k 0", "R br/k"},
		{"extend token 0", "K br/k 0 1000", "K br/k"},
		{"release token overflows u64", "R br/k 18446744073709551616", "R br/k"},
		{"extend token overflows u64", "K br/k 18446744073709551616 1000", "K br/k"},
		{"release token negative", "R br/k -1", "R br/k"},
		{"key of 251 bytes", "Q " + long, q},
		{"key of 251 bytes in acquire", "A " + long + " 1000 0", q},
		{"key with control byte", "Q br\x01k", q},
		{"key with tab", "Q br\tk", q},
		{"key with CR inside", "Q br\rk", q},
		{"key with DEL", "Q br\x7fk", q},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := harness.Dial(t, addr)
			got := c.Do(t, tc.line)
			want := tc.echo + " ERR badrequest"
			if got != want && !strings.HasPrefix(got, want+" ") {
				t.Fatalf("%q: got %q, want %q [text]", tc.line, got, want)
			}
			// The connection is still good.
			queryFree(t, c, "br/ok")
		})
	}

	// The limits themselves are fine.
	c := harness.Dial(t, addr)
	queryFree(t, c, strings.Repeat("m", 250))
	do(t, c, "Q    br/spaces", "Q br/spaces FREE") // fields split on runs of spaces
	c.Send("A br/max 86400000 86400000")
	tok := readGrant(t, c, "br/max", answerWithin)
	do(t, c, fmt.Sprintf("K br/max %d 86400000", tok), "K br/max OK")
	do(t, c, "R br/max 18446744073709551615", "R br/max NOTHELD")
	do(t, c, fmt.Sprintf("R br/max %d", tok), "R br/max OK")
}

func testCRLF(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "crlf/k"
	c := harness.Dial(t, addr)
	if _, err := c.Write([]byte("A " + k + " 10000 0\r\n")); err != nil {
		t.Fatal(err)
	}
	tok := readGrant(t, c, k, answerWithin) // an answer with a CR would not match
	c.Send(fmt.Sprintf("K %s %d 10000\r", k, tok))
	c.Expect(t, "K "+k+" OK")
	c.Send("Q " + k + "\r")
	expectHeld(t, c, k, tok)
	c.Send(fmt.Sprintf("R %s %d\r", k, tok), "Q "+k+"\r")
	lines, err := c.ReadLines(2, answerWithin)
	if err != nil {
		t.Fatal(err)
	}
	// Q's answer may come before R's; the state it shows is then either.
	sort.Strings(lines)
	if lines[1] != "R "+k+" OK" || (lines[0] != "Q "+k+" FREE" && !regexp.MustCompile(heldPattern(k)).MatchString(lines[0])) {
		t.Fatalf("got %q", lines)
	}
	queryFree(t, c, k)
}

func testLineTooLong(t *testing.T, n *harness.Node) {
	addr := n.ClientAddr
	const k = "long/k"
	other := harness.Dial(t, addr)
	tok := acquire(t, other, k, 30000)

	// 1024 bytes (not counting LF or CR LF) is allowed: padding the space
	// between op and key keeps it a valid query.
	for _, end := range []string{"\n", "\r\n"} {
		c := harness.Dial(t, addr)
		line := "Q" + strings.Repeat(" ", 1024-1-len(k)) + k
		if _, err := c.Write([]byte(line + end)); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadLine(answerWithin)
		if err != nil {
			t.Fatalf("1024-byte line ending %q: %v", end, err)
		}
		if !regexp.MustCompile(heldPattern(k)).MatchString(got) && !strings.Contains(got, " ERR badrequest") {
			t.Fatalf("1024-byte line ending %q: got %q, want an answer or ERR badrequest", end, got)
		}
		queryHeld(t, c, k, tok) // still open
	}

	c := harness.Dial(t, addr)
	if _, err := c.Write([]byte(strings.Repeat("x", 1025) + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadLine(answerWithin)
	if err != nil {
		t.Fatalf("1025-byte line: %v", err)
	}
	if got != "? - ERR toolong" && !strings.HasPrefix(got, "? - ERR toolong ") {
		t.Fatalf("1025-byte line: got %q, want \"? - ERR toolong ...\"", got)
	}
	if got, err := c.ReadLine(answerWithin); err == nil || harness.IsTimeout(err) {
		t.Fatalf("after ERR toolong: got %q, %v; want the connection closed", got, err)
	}

	// Other connections are unaffected.
	queryHeld(t, other, k, tok)
	do(t, other, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
}

// --- durability -------------------------------------------------------------

func TestKillRestartDurability(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := harness.Dial(t, n.ClientAddr)

	maxTok := map[string]uint64{} // the largest token seen per key
	all := map[uint64]string{}    // every token seen, to check uniqueness
	grant := func(c *harness.Conn, k string, lease int) uint64 {
		t.Helper()
		tok := acquire(t, c, k, lease)
		if tok <= maxTok[k] {
			t.Fatalf("%s: token %d after token %d", k, tok, maxTok[k])
		}
		if other, dup := all[tok]; dup {
			t.Fatalf("token %d issued for %s and for %s", tok, other, k)
		}
		maxTok[k], all[tok] = tok, k
		return tok
	}

	// A few rounds on every key, so that each has a token history.
	keys := []string{"dur/held", "dur/released", "dur/released-no-token", "dur/extended", "dur/regranted"}
	for range 3 {
		for _, k := range keys {
			tok := grant(c, k, 60000)
			do(t, c, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
		}
	}
	held := grant(c, "dur/held", 60000)
	rel := grant(c, "dur/released", 60000)
	do(t, c, fmt.Sprintf("R dur/released %d", rel), "R dur/released OK")
	grant(c, "dur/released-no-token", 60000)
	do(t, c, "R dur/released-no-token", "R dur/released-no-token OK")
	ext := grant(c, "dur/extended", 60000)
	do(t, c, fmt.Sprintf("K dur/extended %d 600000", ext), "K dur/extended OK")
	re1 := grant(c, "dur/regranted", 60000)
	do(t, c, fmt.Sprintf("R dur/regranted %d", re1), "R dur/regranted OK")
	re2 := grant(c, "dur/regranted", 60000)

	n.Kill()
	n.Restart()

	c = harness.Dial(t, n.ClientAddr)
	queryHeld(t, c, "dur/held", held)
	if rem := queryHeld(t, c, "dur/extended", ext); rem <= 60000 {
		t.Errorf("dur/extended: %d ms left, but it was extended to 600000 ms", rem)
	}
	queryHeld(t, c, "dur/regranted", re2)
	queryFree(t, c, "dur/released")
	queryFree(t, c, "dur/released-no-token")

	// New grants continue every key's token sequence (the protocol orders
	// tokens per key; across keys they need only be distinct).
	for _, k := range []string{"dur/released", "dur/released-no-token"} {
		grant(c, k, 60000)
	}
	do(t, c, fmt.Sprintf("R dur/held %d", held), "R dur/held OK")
	grant(c, "dur/held", 60000)
	do(t, c, fmt.Sprintf("R dur/regranted %d", re1), "R dur/regranted NOTHELD")
}

// TestKillRestartAfterCheckpoints holds enough locks on one shard for the
// state machine to write a checkpoint of its own (65,536 changed keys),
// changes more after it, and kills the node: the restart must rebuild the
// table from that checkpoint plus the Raft log after it.
func TestKillRestartAfterCheckpoints(t *testing.T) {
	t.Parallel()
	const n, released = 70000, 1000
	node := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1})
	c := harness.Dial(t, node.ClientAddr)

	key := func(i int) string { return fmt.Sprintf("ckpt/%d", i) }
	tokens := make([]uint64, n)
	var maxTok uint64
	re := regexp.MustCompile(`^A ckpt/([0-9]+) OK ([1-9][0-9]*)$`)
	for _, l := range pipeline(t, c, n, func(i int) string { return "A " + key(i) + " 600000 0" }) {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("got %q, want A ckpt/<i> OK <token>", l)
		}
		i, _ := strconv.Atoi(m[1])
		tokens[i] = parseU64(t, m[2])
		maxTok = max(maxTok, tokens[i])
	}
	for _, l := range pipeline(t, c, released, func(i int) string { return fmt.Sprintf("R %s %d", key(i), tokens[i]) }) {
		if !strings.HasSuffix(l, " OK") {
			t.Fatalf("release: got %q", l)
		}
	}
	// The checkpoint is written without fsync: pebble's WAL writer hands it
	// to the kernel moments later. Losing it to a kill before then would be
	// safe (the log still has everything after the last fsynced one) but
	// would not test it, so give it that moment.
	time.Sleep(500 * time.Millisecond)

	node.Kill()
	node.Restart()

	c = harness.Dial(t, node.ClientAddr)
	for _, i := range []int{0, released - 1} {
		queryFree(t, c, key(i))
	}
	for _, i := range []int{released, 1<<16 - 1, 1 << 16, n - 1} {
		queryHeld(t, c, key(i), tokens[i])
	}
	if tok := acquire(t, c, key(0), 60000); tok <= maxTok {
		t.Fatalf("token %d after restart, not above %d", tok, maxTok)
	}
}

// --- command line -----------------------------------------------------------

// lastLine returns the last non-empty line of s: the reason batond gives
// when it cannot start comes after whatever it logged before.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// expectRefusal checks that a batond run ended by itself with a non-zero
// status and a one-line "batond: ..." reason that contains one of words.
func expectRefusal(t *testing.T, res harness.Result, words ...string) {
	t.Helper()
	if res.TimedOut {
		t.Fatalf("batond kept running; want it to refuse to start")
	}
	if res.Code == 0 {
		t.Fatalf("exit status 0; want non-zero")
	}
	reason := lastLine(res.Stderr)
	if !strings.HasPrefix(reason, "batond: ") {
		t.Fatalf("last line of stderr %q; want a one-line \"batond: ...\" reason", reason)
	}
	for _, w := range words {
		if strings.Contains(strings.ToLower(reason), strings.ToLower(w)) {
			return
		}
	}
	t.Fatalf("reason %q mentions none of %q", reason, words)
}

// singleNodeArgs is the command line of a single node on free ports.
func singleNodeArgs(t *testing.T, data string) []string {
	t.Helper()
	addrs := harness.FreeAddrs(t, 2)
	return []string{"--id", "1", "--peers", addrs[0] + "/" + addrs[1], "--data", data, "--shards", "4"}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	res := harness.Run(t, harness.Bin(t), "", 10*time.Second, "--help")
	if res.TimedOut || res.Code != 0 {
		t.Fatalf("--help: exit %d (timed out %v), want 0", res.Code, res.TimedOut)
	}
	out := res.Stdout + res.Stderr
	for _, f := range []string{"id", "peers", "data", "shards", "http", "log-level", "log-format",
		"max-conns", "max-waiters-per-conn", "max-waiters-per-key", "max-waiters", "max-pending-queries",
		"max-proposals-in-flight", "max-pending-commands", "max-unsent-per-conn", "max-unsent",
		"auth-file", "tls-listen", "tls-cert", "tls-key", "tls-client-ca", "tls-peers",
		"raft-tls-ca", "raft-tls-cert", "raft-tls-key", "heap-floor"} {
		if !regexp.MustCompile(`(^|[^-\w])--?` + f + `\b`).MatchString(out) {
			t.Errorf("--help does not mention --%s", f)
		}
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		words []string // the reason mentions one of these
		// parse errors come before any logging: stderr is that one line
		onlyLine bool
	}{
		{"unknown flag", []string{"--no-such-flag"}, []string{"no-such-flag"}, true},
		{"shards not a number", []string{"--shards", "many"}, []string{"shards"}, true},
		{"id past the peers", []string{"--id", "3"}, []string{"id", "peers"}, false},
		{"malformed peers", []string{"--peers", "nonsense"}, []string{"peers"}, false},
		{"limit of 0", []string{"--max-conns", "0"}, []string{"max-conns"}, true},
		{"size not a size", []string{"--max-unsent", "lots"}, []string{"max-unsent"}, true},
		{"heap floor past 4GiB", []string{"--heap-floor", "5GiB"}, []string{"heap-floor"}, true},
		{"unknown log format", []string{"--log-format", "xml"}, []string{"log-format"}, true},
		{"TLS listener without certificate", []string{"--tls-listen", "127.0.0.1:0"}, []string{"tls-cert"}, false},
		{"TLS peers not one per peer", []string{"--tls-peers", "127.0.0.1:1,127.0.0.1:2"}, []string{"tls-peers"}, false},
		{"raft TLS without key", []string{"--raft-tls-ca", "ca.pem", "--raft-tls-cert", "node.pem"}, []string{"raft-tls-key"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(singleNodeArgs(t, filepath.Join(t.TempDir(), "data")), tc.args...)
			res := harness.Run(t, harness.Bin(t), "", 30*time.Second, args...)
			expectRefusal(t, res, tc.words...)
			if lines := strings.Split(strings.TrimRight(res.Stderr, "\n"), "\n"); tc.onlyLine && len(lines) != 1 {
				t.Errorf("stderr has %d lines, want one:\n%s", len(lines), res.Stderr)
			}
		})
	}
}

func TestAddressInUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		busy func(raft, client, http string) string // which one to occupy
	}{
		{"client", func(_, client, _ string) string { return client }},
		{"raft", func(raft, _, _ string) string { return raft }},
		{"http", func(_, _, http string) string { return http }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addrs := harness.FreeAddrs(t, 3)
			busy := tc.busy(addrs[0], addrs[1], addrs[2])
			l, err := net.Listen("tcp", busy)
			if err != nil {
				t.Skipf("cannot occupy %s: %v", busy, err)
			}
			defer l.Close()
			res := harness.Run(t, harness.Bin(t), "", 30*time.Second,
				"--id", "1", "--peers", addrs[0]+"/"+addrs[1], "--http", addrs[2],
				"--data", filepath.Join(t.TempDir(), "data"), "--shards", "4")
			_, port, _ := net.SplitHostPort(busy)
			expectRefusal(t, res, port, "in use")
		})
	}
}

func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := harness.Dial(t, n.ClientAddr)
	tok := acquire(t, c, "locked/k", 60000)

	// Other ports, so that the data dir is the only thing the two share.
	res := harness.Run(t, harness.Bin(t), "", 30*time.Second, singleNodeArgs(t, n.DataDir)...)
	expectRefusal(t, res, n.DataDir, "data")

	// The first node is unharmed.
	queryHeld(t, c, "locked/k", tok)
	do(t, c, fmt.Sprintf("R locked/k %d", tok), "R locked/k OK")
}

// TestSettingsFixed: --shards is fixed when the data dir is created; a
// start with another value is refused, and does no harm. --peers only
// bootstraps (protocol 1.3): another one at a restart is ignored, with a
// warning, and the node restarts on its data dir's addresses.
func TestSettingsFixed(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := harness.Dial(t, n.ClientAddr)
	tok := acquire(t, c, "shards/k", 600000)
	if code, err := n.Stop(); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}

	for _, tc := range []struct {
		flag   string
		change func(string) string
	}{
		{"--shards", func(string) string { return "8" }},
	} {
		args := append([]string(nil), n.Args...)
		for i := range args {
			if args[i] == tc.flag {
				args[i+1] = tc.change(args[i+1])
			}
		}
		res := harness.Run(t, harness.Bin(t), "", 30*time.Second, args...)
		expectRefusal(t, res, strings.TrimPrefix(tc.flag, "--"))
	}

	// The refused starts did not damage the data dir; another --peers is
	// ignored.
	args := n.Args
	for i := range n.Args {
		if n.Args[i] == "--peers" {
			n.Args = slices.Clone(args)
			n.Args[i+1] += ",127.0.0.1:1/127.0.0.1:2"
		}
	}
	n.Restart()
	if !strings.Contains(n.Log(), "--peers differs from the data dir's and is ignored") {
		t.Errorf("a restart with another --peers did not warn that it ignores it")
	}
	queryHeld(t, harness.Dial(t, n.ClientAddr), "shards/k", tok)
	n.Args = args
}

// TestRaftLogKept: a data dir keeps the Raft log store it was created
// with. One made with dragonboat's store (as every data dir from before
// --raft-log) restarts on it without the flag, after kill -9, with its
// locks, although a new data dir would get seglog; asking it for another
// store is refused and damages nothing.
func TestRaftLogKept(t *testing.T) {
	t.Parallel()
	const store = "dragonboat"
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 4, Args: []string{"--raft-log", store}})
	c := harness.Dial(t, n.ClientAddr)
	tok := acquire(t, c, "raftlog/k", 600000)
	n.Kill()

	args := append([]string(nil), n.Args...)
	for i := range args {
		if args[i] == "--raft-log" {
			args[i+1] = "seglog"
		}
	}
	res := harness.Run(t, harness.Bin(t), "", 30*time.Second, args...)
	expectRefusal(t, res, "raft-log", store)

	n.Args = slices.DeleteFunc(append([]string(nil), n.Args...), func(a string) bool { return a == "--raft-log" || a == store })
	n.Restart()
	queryHeld(t, harness.Dial(t, n.ClientAddr), "raftlog/k", tok)
}

// TestRaftLogBatonDropped: baton's pebble store (--raft-log baton) is no
// longer in batond. The flag is refused as a bad value, in one line that
// names the two stores left; a data dir whose settings say it was made
// with that store is refused at start with one line that says how to keep
// its locks (a backup by an older batond, --restore), and nothing in it
// changes. (The data dir here is a seglog one with its settings rewritten,
// so that the test can show it whole afterwards: with its settings put
// back it starts with its lock.)
func TestRaftLogBatonDropped(t *testing.T) {
	t.Parallel()
	t.Run("flag", func(t *testing.T) {
		t.Parallel()
		data := filepath.Join(t.TempDir(), "data")
		res := harness.Run(t, harness.Bin(t), "", 30*time.Second, append(singleNodeArgs(t, data), "--raft-log", "baton")...)
		expectRefusal(t, res, "raft-log")
		if res.Code != 2 {
			t.Errorf("exit %d, want 2 (a bad flag)", res.Code)
		}
		if lines := strings.Split(strings.TrimRight(res.Stderr, "\n"), "\n"); len(lines) != 1 {
			t.Errorf("stderr has %d lines, want one:\n%s", len(lines), res.Stderr)
		}
		for _, w := range []string{"--raft-log baton", "seglog", "dragonboat"} {
			if !strings.Contains(res.Stderr, w) {
				t.Errorf("refusal %q does not name %q", lastLine(res.Stderr), w)
			}
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("the refused start made its data dir (%v)", err)
		}
	})
	t.Run("data dir", func(t *testing.T) {
		t.Parallel()
		n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 1})
		tok := acquire(t, harness.Dial(t, n.ClientAddr), "dropped/k", 600000)
		if code, err := n.Stop(); code != 0 || err != nil {
			t.Fatalf("stop: exit %d, %v", code, err)
		}
		setRaftLog := func(store string) {
			t.Helper()
			p := filepath.Join(n.DataDir, "baton.json")
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var settings map[string]any
			if err := json.Unmarshal(raw, &settings); err != nil {
				t.Fatal(err)
			}
			settings["raft_log"] = store
			if raw, err = json.Marshal(settings); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		setRaftLog("baton")
		before := filesOf(t, n.DataDir)
		for _, extra := range [][]string{nil, {"--raft-log", "seglog"}} {
			res := harness.Run(t, harness.Bin(t), "", 30*time.Second, append(slices.Clone(n.Args), extra...)...)
			expectRefusal(t, res, "raft-log")
			if res.Code == 2 {
				t.Errorf("exit 2 (a bad flag); want 1, a refused data dir")
			}
			reason := lastLine(res.Stderr)
			for _, w := range []string{n.DataDir, "--raft-log baton", "older batond", "baton backup", "--restore"} {
				if !strings.Contains(reason, w) {
					t.Errorf("refusal %q (flags %q) does not say %q", reason, extra, w)
				}
			}
		}
		if after := filesOf(t, n.DataDir); !maps.Equal(after, before) {
			t.Errorf("the refused starts changed the data dir:\nbefore %v\nafter  %v", before, after)
		}
		setRaftLog("seglog")
		n.Restart()
		queryHeld(t, harness.Dial(t, n.ClientAddr), "dropped/k", tok)
	})
}

// filesOf maps every file under dir to its size and modification time.
func filesOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		files[p] = fmt.Sprintf("%d bytes, %s", fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestSignalsExitZero(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			n := startNode(t)
			c := harness.Dial(t, n.ClientAddr)
			tok := acquire(t, c, "sig/k", 600000)
			if err := n.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code, err := n.Wait(harness.StopTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if code != 0 {
				t.Fatalf("exit status %d after %v, want 0", code, sig)
			}
			// What was acknowledged before the signal survives it.
			n.Restart()
			queryHeld(t, harness.Dial(t, n.ClientAddr), "sig/k", tok)
		})
	}
}

// TestDefaults runs batond with no flags at all: one node on the default
// ports, data in ./baton-data.
func TestDefaults(t *testing.T) {
	t.Parallel()
	b := harness.Bin(t)
	for _, a := range []string{"127.0.0.1:7700", "127.0.0.1:7701"} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Skipf("default port busy: %v", err)
		}
		l.Close()
	}
	dir := t.TempDir()
	n := harness.NewNode(t, b, dir, "127.0.0.1:7700")
	n.Start()
	c := harness.Dial(t, "127.0.0.1:7700")
	tok := acquire(t, c, "defaults/k", 10000)
	do(t, c, fmt.Sprintf("R defaults/k %d", tok), "R defaults/k OK")
	if fi, err := os.Stat(filepath.Join(dir, "baton-data")); err != nil || !fi.IsDir() {
		t.Errorf("no ./baton-data directory in the working directory: %v", err)
	}
	if code, err := n.Stop(); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}
}

// testOwners: protocol 1.1. The owner is stored and shown by Q; a retry
// with the holder's owner (any connection, a try-lock too) gets the same
// token at once without touching the lease; another owner queues; two
// acquires of one owner waiting share one grant.
func testOwners(t *testing.T, n *harness.Node) {
	const k = "owners/k"
	c1, c2, c3 := harness.Dial(t, n.ClientAddr), harness.Dial(t, n.ClientAddr), harness.Dial(t, n.ClientAddr)
	c1.Send("A " + k + " 10000 0 host-a:17/0f3c")
	tok := readGrant(t, c1, k, answerWithin)
	before := heldBy(t, c1, k, tok, "host-a:17/0f3c")

	time.Sleep(50 * time.Millisecond) // so that a lease restarted by the retry would show
	for _, req := range []string{"A " + k + " 20000 0 host-a:17/0f3c", "A " + k + " 20000 -1 host-a:17/0f3c"} {
		c2.Send(req)
		if again := readGrant(t, c2, k, answerWithin); again != tok {
			t.Fatalf("%q: token %d, want the holder's %d", req, again, tok)
		}
	}
	if after := heldBy(t, c1, k, tok, "host-a:17/0f3c"); after >= before {
		t.Fatalf("remaining %d ms after the retries, %d before: the lease was touched", after, before)
	}
	do(t, c3, "A "+k+" 10000 100 someone-else", "A "+k+" TIMEOUT")

	// Two acquires of one owner wait; a third owner waits between them.
	// Connections are not ordered against each other, so each acquire is
	// known queued (a query behind it on its connection is answered) before
	// the next is sent.
	c4 := harness.Dial(t, n.ClientAddr)
	for _, w := range []struct {
		c     *harness.Conn
		owner string
	}{{c2, "waiter-b"}, {c3, "waiter-c"}, {c4, "waiter-b"}} {
		w.c.Send("A " + k + " 10000 0 " + w.owner)
		heldBy(t, w.c, k, tok, "host-a:17/0f3c")
	}
	do(t, c1, fmt.Sprintf("R %s %d", k, tok), "R "+k+" OK")
	shared := readGrant(t, c2, k, answerWithin)
	if other := readGrant(t, c4, k, answerWithin); other != shared || shared <= tok {
		t.Fatalf("owner waiter-b got tokens %d and %d, want one token above %d", shared, other, tok)
	}
	c3.ExpectNothing(t, 100*time.Millisecond)
	heldBy(t, c1, k, shared, "waiter-b")
	do(t, c1, fmt.Sprintf("R %s %d", k, shared), "R "+k+" OK")
	next := readGrant(t, c3, k, answerWithin)
	heldBy(t, c1, k, next, "waiter-c")
	do(t, c1, fmt.Sprintf("R %s %d", k, next), "R "+k+" OK")
}
