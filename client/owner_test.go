package client

// Owners against the fake server: what the A line carries, that a retry
// carries the same owner whatever made it retry, WithOwnerPrefix and
// WithOwner, and the owner a query reports.

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/codec"
)

// ownerOf returns the owner field of an acquire line, failing the test
// when it has none.
func ownerOf(t *testing.T, line string) string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "A" {
		t.Fatalf("acquire line %q: want A key lease_ms wait_ms owner", line)
	}
	return f[4]
}

// nextOf returns the next request line that reaches any of servers,
// failing the test after 5 s.
func nextOf(t *testing.T, servers ...*fakeServer) (fakeLine, *fakeServer) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		for _, s := range servers {
			select {
			case l := <-s.lines:
				return l, s
			default:
			}
		}
		select {
		case <-timeout:
			t.Fatal("fake servers: no request within 5s")
		case <-time.After(time.Millisecond):
		}
	}
}

// TestOwnerOnTheAcquireLine: every acquire names an owner, the prefix
// followed by 32 hex digits, 1..64 valid bytes, which Lock.Owner returns;
// two acquires never name the same one.
func TestOwnerOnTheAcquireLine(t *testing.T) {
	for _, prefix := range []string{"", "web-3:4121:", strings.Repeat("p", MaxOwnerPrefix), "é/ü:"} {
		t.Run(prefix, func(t *testing.T) {
			s := startFake(t)
			c := newTestClientWith(t, []string{s.addr()}, WithOwnerPrefix(prefix))
			ctx := ctxFor(t, 10*time.Second)
			seen := make(map[string]bool)
			for i := range 3 {
				done := make(chan *Lock, 1)
				go func() {
					l, err := c.TryAcquire(ctx, "o", time.Second)
					if err != nil {
						t.Error(err)
					}
					done <- l
				}()
				req := s.next()
				if !strings.HasPrefix(req.text, "A o 1000 -1 ") {
					t.Fatalf("request %q", req.text)
				}
				owner := ownerOf(t, req.text)
				random, ok := strings.CutPrefix(owner, prefix)
				if _, err := hex.DecodeString(random); !ok || len(random) != 32 || err != nil {
					t.Fatalf("owner %q: want %q and 32 hex digits", owner, prefix)
				}
				if !codec.ValidOwner([]byte(owner)) {
					t.Fatalf("owner %q is not a valid owner", owner)
				}
				if seen[owner] {
					t.Fatalf("acquire %d named owner %q again", i, owner)
				}
				seen[owner] = true
				reply(t, req.nc, "A o OK 5")
				if l := <-done; l == nil || l.Owner() != owner {
					t.Fatalf("Lock.Owner %q, want %q", l.Owner(), owner)
				}
			}
		})
	}
}

// TestOwnerSameOnEveryRetry: whatever makes an acquire try again (ERR
// unavailable, MOVED, a dropped connection, a stalled one, several of
// them in a row) the retry names the owner of the first attempt, so that
// the server can answer it with a grant the first one may have got. Such
// a grant may be older than the retry, so when an attempt may have taken
// effect the client renews the lease before it hands the lock over, and
// the Lock's lease counts from the renewal; after MOVED alone, which
// grants nothing, it counts from the last attempt, with no renewal.
func TestOwnerSameOnEveryRetry(t *testing.T) {
	const lease = 10 * time.Second
	// A step makes the attempt on l fail; ambiguous says whether that
	// attempt may have taken effect all the same.
	type step struct {
		name      string
		do        func(t *testing.T, l fakeLine, other *fakeServer)
		ambiguous bool
	}
	var (
		unavailable = step{"unavailable", func(t *testing.T, l fakeLine, _ *fakeServer) {
			reply(t, l.nc, "A k ERR unavailable no leader for this key right now, retry")
		}, true}
		moved = step{"moved", func(t *testing.T, l fakeLine, other *fakeServer) {
			reply(t, l.nc, "A k MOVED "+other.addr())
		}, false}
		drop = step{"drop", func(t *testing.T, l fakeLine, _ *fakeServer) {
			l.nc.Close()
		}, true}
		stall = step{"stall", func(*testing.T, fakeLine, *fakeServer) {
			// Nothing: the hung fake answers neither this nor a heartbeat.
		}, true}
	)
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"ERR unavailable", []step{unavailable}},
		{"MOVED", []step{moved}},
		{"dropped connection", []step{drop}},
		{"stalled connection", []step{stall}},
		{"MOVED, unavailable, dropped", []step{moved, unavailable, drop}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, other := startFake(t), startFake(t)
			if tc.steps[0].name == "stall" {
				s.hung.Store(true)
			}
			c := newTestClientWith(t, []string{s.addr()}, WithStallTimeout(testStallTimeout))
			ctx := ctxFor(t, 10*time.Second)
			done := make(chan *Lock, 1)
			go func() {
				l, err := c.Acquire(ctx, "k", lease, WaitForever)
				if err != nil {
					t.Error(err)
				}
				done <- l
			}()
			req := s.next()
			owner := ownerOf(t, req.text)
			ambiguous := false
			var lastAnswered time.Time // the last attempt was sent after this
			for _, st := range tc.steps {
				lastAnswered = time.Now()
				st.do(t, req, other)
				ambiguous = ambiguous || st.ambiguous
				prev := req
				req, _ = nextOf(t, s, other)
				if got := ownerOf(t, req.text); got != owner {
					t.Fatalf("after %s: retry %q names owner %q, want the first attempt's %q", st.name, req.text, got, owner)
				}
				if (st.name == "drop" || st.name == "stall") && req.nc == prev.nc {
					t.Fatalf("after %s: retry on the same connection", st.name)
				}
			}
			reply(t, req.nc, "A k OK 77")
			leaseFrom := lastAnswered
			if ambiguous {
				renew, _ := nextOf(t, s, other)
				if renew.text != "K k 77 10000" {
					t.Fatalf("after a grant that may be older than its attempt: %q, want the renewal K k 77 10000", renew.text)
				}
				leaseFrom = time.Now() // the renewal was sent before
				reply(t, renew.nc, "K k OK")
			}
			l := <-done
			if l == nil || l.Token() != 77 || l.Owner() != owner {
				t.Fatalf("lock %+v, want token 77 of owner %q", l, owner)
			}
			l.mu.Lock()
			expires := l.expires
			l.mu.Unlock()
			if ambiguous && expires.After(leaseFrom.Add(lease)) {
				t.Errorf("the lease ends %v after the renewal's lease: it must count from the renewal", expires.Sub(leaseFrom.Add(lease)))
			}
			if !ambiguous && expires.Before(leaseFrom.Add(lease)) {
				t.Errorf("the lease ends %v early: it must count from the last attempt", leaseFrom.Add(lease).Sub(expires))
			}
			for _, f := range []*fakeServer{s, other} {
				f.nothing(50 * time.Millisecond)
			}
		})
	}
}

// TestRenewalNotHeldAcquiresAgain: a grant that ran out before its renewal
// (its answer came late, say behind another acquire of the key) is not
// handed over: the client asks again, a new acquire of the same owner,
// and the grant that brings, made after it was sent, needs no renewal.
func TestRenewalNotHeldAcquiresAgain(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	ctx := ctxFor(t, 10*time.Second)
	done := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "k", time.Second, WaitForever)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	req := s.next()
	owner := ownerOf(t, req.text)
	req.nc.Close()
	req = s.next()
	reply(t, req.nc, "A k OK 5")
	renew := s.next()
	if renew.text != "K k 5 1000" {
		t.Fatalf("after a retry's grant: %q, want K k 5 1000", renew.text)
	}
	reply(t, renew.nc, "K k NOTHELD")
	again := s.next()
	if ownerOf(t, again.text) != owner {
		t.Fatalf("after the renewal found the grant gone: %q, want an acquire of owner %q", again.text, owner)
	}
	reply(t, again.nc, "A k OK 9")
	if l := <-done; l == nil || l.Token() != 9 {
		t.Fatalf("lock %+v, want token 9", l)
	}
	s.nothing(100 * time.Millisecond)
}

// TestBadOwnerPrefix: New rejects a prefix that would not leave an owner
// of at most 64 valid bytes.
func TestBadOwnerPrefix(t *testing.T) {
	for _, prefix := range []string{
		"a b",
		"tab\there",
		"line\n",
		"del\x7f",
		"nul\x00",
		strings.Repeat("p", MaxOwnerPrefix+1),
		strings.Repeat("é", MaxOwnerPrefix/2) + "x", // bytes, not characters
	} {
		if c, err := New([]string{"127.0.0.1:1"}, WithOwnerPrefix(prefix)); err == nil {
			c.Close()
			t.Errorf("New with owner prefix %q: no error", prefix)
		}
	}
}

// TestWithOwner: an acquire given an owner sends it as it is, on every
// retry, and renews the lease of the grant it gets (which may be older
// than the call); a bad owner is rejected before anything is sent.
func TestWithOwner(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	ctx := ctxFor(t, 10*time.Second)
	type result struct {
		l   *Lock
		err error
	}
	acquire := func() chan result {
		done := make(chan result, 1)
		go func() {
			l, err := c.Acquire(ctx, "w", 5*time.Second, WaitForever, WithOwner("job-17"))
			done <- result{l, err}
		}()
		return done
	}

	done := acquire()
	req := s.next()
	if !strings.HasPrefix(req.text, "A w 5000 ") || ownerOf(t, req.text) != "job-17" {
		t.Fatalf("request %q, want owner job-17", req.text)
	}
	req.nc.Close()
	req = s.next()
	if ownerOf(t, req.text) != "job-17" {
		t.Fatalf("retry %q, want owner job-17", req.text)
	}
	reply(t, req.nc, "A w OK 31")
	renew := s.next()
	if renew.text != "K w 31 5000" {
		t.Fatalf("after the grant: %q, want the renewal K w 31 5000", renew.text)
	}
	renewedAt := time.Now()
	reply(t, renew.nc, "K w OK")
	r := <-done
	if r.err != nil || r.l.Token() != 31 || r.l.Owner() != "job-17" {
		t.Fatalf("acquire: %+v, %v", r.l, r.err)
	}
	r.l.mu.Lock()
	expires := r.l.expires
	r.l.mu.Unlock()
	if expires.After(renewedAt.Add(5 * time.Second)) {
		t.Errorf("the lease ends after the renewal's lease: %v past it", expires.Sub(renewedAt.Add(5*time.Second)))
	}

	// The grant ran out before the renewal: the client asks again, and the
	// grant that brings is new, with nothing to renew.
	done = acquire()
	req = s.next()
	reply(t, req.nc, "A w OK 32")
	renew = s.next()
	reply(t, renew.nc, "K w NOTHELD")
	req = s.next()
	if ownerOf(t, req.text) != "job-17" {
		t.Fatalf("after the renewal found the grant gone: %q, want an acquire of job-17", req.text)
	}
	reply(t, req.nc, "A w OK 34")
	if r := <-done; r.err != nil || r.l.Token() != 34 {
		t.Fatalf("acquire after a renewal NOTHELD: %+v, %v; want token 34", r.l, r.err)
	}
	s.nothing(100 * time.Millisecond)

	// The renewal fails otherwise: the grant is released, since the
	// caller does not get it.
	done = acquire()
	req = s.next()
	reply(t, req.nc, "A w OK 33")
	renew = s.next()
	reply(t, renew.nc, "K w ERR internal disk on fire")
	var se *ServerError
	if r := <-done; !errors.As(r.err, &se) || r.l != nil {
		t.Fatalf("renewal ERR: %+v, %v", r.l, r.err)
	}
	if rel := s.next(); rel.text != "R w 33" {
		t.Fatalf("after a failed renewal: %q, want R w 33", rel.text)
	} else {
		reply(t, rel.nc, "R w OK")
	}

	for _, owner := range []string{"", "a b", "nl\n", strings.Repeat("o", codec.MaxOwner+1)} {
		if _, err := c.Acquire(ctx, "w", time.Second, NoWait, WithOwner(owner)); err == nil {
			t.Errorf("acquire with owner %q: no error", owner)
		}
	}
	s.nothing(100 * time.Millisecond)
}

// TestQueryOwner: Query reports the holder's owner, "" when its grant has
// none.
func TestQueryOwner(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	for _, tc := range []struct {
		answer string
		want   State
	}{
		{"Q q HELD 1027 9400 web-3:4121:9f86d081884c7d659a2feaa0c55ad015",
			State{Held: true, Token: 1027, Remaining: 9400 * time.Millisecond, Owner: "web-3:4121:9f86d081884c7d659a2feaa0c55ad015", Holders: 1, Permits: 1}},
		{"Q q HELD 1027 0 job-17", State{Held: true, Token: 1027, Owner: "job-17", Holders: 1, Permits: 1}},
		{"Q q HELD 1027 9400", State{Held: true, Token: 1027, Remaining: 9400 * time.Millisecond, Holders: 1, Permits: 1}},
		{"Q q FREE", State{}},
	} {
		done := make(chan State, 1)
		go func() {
			st, err := c.Query(context.Background(), "q")
			if err != nil {
				t.Error(err)
			}
			done <- st
		}()
		req := s.next()
		reply(t, req.nc, tc.answer)
		if got := <-done; got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.answer, got, tc.want)
		}
	}
}

// TestGaveUpAcquireCleanedUp: an acquire whose every attempt was dropped
// (its connections failed after it was sent) fails, and the grant one of
// them may have got unseen is released: a try-lock with the acquire's
// owner gets it back, and its token is released. One whose attempts were
// all answered leaves nothing to clean up.
func TestGaveUpAcquireCleanedUp(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr()) // two connections to the one address
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "k", 10*time.Second, WaitForever)
		done <- err
	}()
	first := s.next()
	owner := strings.Fields(first.text)[4]
	first.nc.Close()
	second := s.next()
	if second.text != first.text {
		t.Fatalf("retry %q, want the same request %q", second.text, first.text)
	}
	second.nc.Close()
	if err := recv(t, done); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("acquire after every connection dropped it: %v, want ErrUnavailable", err)
	}
	cleanup := s.next()
	if want := "A k 10000 -1 " + owner; cleanup.text != want {
		t.Fatalf("clean-up %q, want the try-lock %q", cleanup.text, want)
	}
	reply(t, cleanup.nc, "A k OK 7")
	rel := s.next()
	if rel.text != "R k 7" {
		t.Fatalf("after the clean-up's grant: %q, want R k 7", rel.text)
	}
	reply(t, rel.nc, "R k OK")

	// A TIMEOUT answers for sure: nothing to clean up.
	go func() {
		_, err := c.Acquire(context.Background(), "j", 10*time.Second, NoWait)
		done <- err
	}()
	l := s.next()
	reply(t, l.nc, "A j TIMEOUT")
	if err := recv(t, done); !errors.Is(err, ErrTimeout) {
		t.Fatalf("try-lock answered TIMEOUT: %v", err)
	}
	s.nothing(300 * time.Millisecond)
}
