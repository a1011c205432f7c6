package client

import (
	"errors"
	"net"
	"testing"
	"time"
)

// fastRedial makes connections that fail come back within tens of
// milliseconds.
func fastRedial(o *options) { o.redialInterval = 20 * time.Millisecond }

// expectHello reads the next line of s, which must be the H of secret, and
// answers it; it returns the connection it came on.
func expectHello(t *testing.T, s *fakeServer, secret, answer string) net.Conn {
	t.Helper()
	l := s.next()
	if l.text != "H "+secret {
		t.Fatalf("first line %q on a new connection, want H %s", l.text, secret)
	}
	reply(t, l.nc, answer)
	return l.nc
}

// TestHelloOnEveryConnection: with a secret, every connection the client
// opens starts with H, before any request: the first ones, the one to a
// node MOVED names, and a redial.
func TestHelloOnEveryConnection(t *testing.T) {
	follower, leader := startFake(t), startFake(t)
	c := newTestClientWith(t, []string{follower.addr()}, WithSecret("s3cret"), fastRedial)
	for range 2 { // a single address gets two connections
		expectHello(t, follower, "s3cret", "H - OK")
	}
	done := make(chan error, 1)
	query := func() {
		go func() {
			_, err := c.Query(ctxFor(t, 10*time.Second), "m")
			done <- err
		}()
	}
	query()
	req := follower.next()
	if req.text != "Q m" {
		t.Fatalf("got %q, want Q m", req.text)
	}
	reply(t, req.nc, "Q m MOVED "+leader.addr())
	nc := expectHello(t, leader, "s3cret", "H - OK")
	if req = leader.next(); req.text != "Q m" || req.nc != nc {
		t.Fatalf("got %q, want Q m on the connection that sent H", req.text)
	}
	reply(t, req.nc, "Q m FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}

	// The leader's connection drops: the redial says H again, and the
	// requests go on on it.
	nc.Close()
	nc2 := expectHello(t, leader, "s3cret", "H - OK")
	if nc2 == nc {
		t.Fatal("H came on the old connection")
	}
	waitUp(t, c, leader.addr()) // else the request may take another connection
	query()
	if req = leader.next(); req.text != "Q m" || req.nc != nc2 {
		t.Fatalf("got %q, want Q m on the redialled connection", req.text)
	}
	reply(t, req.nc, "Q m FREE")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestHelloRefused: a server that refuses the secret fails the request
// with ErrAuth at once, not after the retries of an unavailable server.
func TestHelloRefused(t *testing.T) {
	s := startFake(t)
	c := newTestClientWith(t, []string{s.addr()}, WithSecret("wrong"))
	for range 2 {
		expectHello(t, s, "wrong", "H - ERR auth")
	}
	start := time.Now()
	_, err := c.Query(ctxFor(t, 10*time.Second), "k")
	if !errors.Is(err, ErrAuth) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v, want ErrAuth alone", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("ErrAuth after %v: retried", d)
	}
	s.nothing(100 * time.Millisecond) // the request was never sent
	t.Log(err)
	// A release, which retries every failure for seconds, does not retry
	// this one either.
	start = time.Now()
	if err := c.Release(ctxFor(t, 10*time.Second), "k", 1); !errors.Is(err, ErrAuth) || time.Since(start) > time.Second {
		t.Fatalf("release: %v after %v, want ErrAuth at once", err, time.Since(start))
	}
}

// TestSecretWanted: a client without a secret, whose requests a server
// answers H - ERR auth, reports ErrAuth.
func TestSecretWanted(t *testing.T) {
	s := startFake(t)
	c := newTestClient(t, s.addr())
	s.waitConns(2)
	done := make(chan error, 1)
	go func() {
		_, err := c.Query(ctxFor(t, 10*time.Second), "k")
		done <- err
	}()
	req := s.next()
	reply(t, req.nc, "H - ERR auth")
	req.nc.Close()
	if err := recv(t, done); !errors.Is(err, ErrAuth) {
		t.Fatalf("error %v, want ErrAuth", err)
	}
}

func TestHelloAnswer(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
		auth bool // the error is ErrAuth
	}{
		{"H - OK", true, false},
		{"H - ERR auth", false, true},
		{"H - ERR badrequest missing secret", false, false},
		// A server of protocol 1.1 does not know H.
		{"? - ERR badrequest op must be A, R, K or Q", false, false},
		{"H - OK 1", false, false},
		{"Q k FREE", false, false},
	} {
		err := helloAnswer("h:1", []byte(tc.line))
		if (err == nil) != tc.ok || errors.Is(err, ErrAuth) != tc.auth {
			t.Errorf("helloAnswer(%q) = %v", tc.line, err)
		}
	}
}

func TestBadSecret(t *testing.T) {
	for _, s := range []string{"two words", "tab\there", "new\nline"} {
		if _, err := New([]string{"127.0.0.1:1"}, WithSecret(s)); err == nil {
			t.Errorf("WithSecret(%q): no error", s)
		}
	}
}

// waitUp waits until c's connection to addr is up.
func waitUp(t *testing.T, c *Client, addr string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		conns := append([]*conn(nil), c.conns...)
		c.mu.Unlock()
		for _, cn := range conns {
			if cn.addr == addr && cn.state.Load() == stateUp {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection to %s is up after 5s", addr)
		}
	}
}
