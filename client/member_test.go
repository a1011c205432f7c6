package client

// The membership requests (member.go) against the fake server: what goes
// on the wire, how answers are read, and which failures are retried.

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// shortMemberWindow makes ERR unavailable to a membership request give up
// within a fraction of a second.
func shortMemberWindow(o *options) { o.memberWindow = 300 * time.Millisecond }

// memberCall runs f in the background and returns its error channel.
func memberCall(f func() error) chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func TestListMembers(t *testing.T) {
	s := startFake(t)
	c := newTestClientWith(t, []string{s.addr()}, WithFixedAddresses())
	var got []Member
	done := memberCall(func() (err error) {
		got, err = c.ListMembers(ctxFor(t, 5*time.Second))
		return err
	})
	req := s.next()
	if req.text != "M - LIST" {
		t.Fatalf("request %q", req.text)
	}
	reply(t, req.nc, "M - OK 2/voter/10.0.0.2:7701/10.0.0.2:7700/- 1/voter/10.0.0.1:7701/10.0.0.1:7700/10.0.0.1:7443 4/learner/[::1]:7701/[::1]:7700/-")
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	want := []Member{
		{ID: 2, Role: RoleVoter, MemberAddrs: MemberAddrs{Raft: "10.0.0.2:7701", Client: "10.0.0.2:7700"}},
		{ID: 1, Role: RoleVoter, MemberAddrs: MemberAddrs{Raft: "10.0.0.1:7701", Client: "10.0.0.1:7700", TLS: "10.0.0.1:7443"}},
		{ID: 4, Role: RoleLearner, MemberAddrs: MemberAddrs{Raft: "[::1]:7701", Client: "[::1]:7700"}},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	for _, bad := range []string{"M - OK 1/voter/a:1/b:2", "M - OK 0/voter/a:1/b:2/-", "M - OK x/voter/a:1/b:2/-", "M - OK 1/voter/a:1//-"} {
		done = memberCall(func() error { _, err := c.ListMembers(ctxFor(t, 5*time.Second)); return err })
		req = s.next()
		reply(t, req.nc, bad)
		if err := recv(t, done); err == nil || !strings.Contains(err.Error(), "bad member") {
			t.Errorf("answer %q: %v", bad, err)
		}
	}
}

func TestMemberChanges(t *testing.T) {
	s := startFake(t)
	c := newTestClientWith(t, []string{s.addr()}, WithFixedAddresses())
	ctx := ctxFor(t, 10*time.Second)
	var id uint64
	for _, tc := range []struct {
		call   func() error
		line   string
		answer string
	}{
		{func() (err error) {
			id, err = c.AddMember(ctx, MemberAddrs{Raft: "10.0.0.4:7701", Client: "10.0.0.4:7700"})
			return err
		}, "M - ADD 10.0.0.4:7701/10.0.0.4:7700", "M - OK 4"},
		{func() (err error) {
			id, err = c.AddMember(ctx, MemberAddrs{Raft: "h5:7701", Client: "h5:7700", TLS: "h5:7443"})
			return err
		}, "M - ADD h5:7701/h5:7700/h5:7443", "M - OK 5"},
		{func() error { return c.RemoveMember(ctx, 3, false) }, "M - REMOVE 3", "M - OK"},
		{func() error { return c.RemoveMember(ctx, 2, true) }, "M - REMOVE 2 FORCE", "M - OK"},
		{func() error { return c.SetMemberPriority(ctx, []uint64{5, 1, 4}) }, "M - PRIORITY 5,1,4", "M - OK"},
	} {
		done := memberCall(tc.call)
		req := s.next()
		if req.text != tc.line {
			t.Fatalf("request %q, want %q", req.text, tc.line)
		}
		reply(t, req.nc, tc.answer)
		if err := recv(t, done); err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
	}
	if id != 5 {
		t.Fatalf("id %d, want 5", id)
	}

	// Bad arguments: nothing is sent.
	for name, err := range map[string]error{
		"no raft":   func() error { _, err := c.AddMember(ctx, MemberAddrs{Client: "h:1"}); return err }(),
		"no client": func() error { _, err := c.AddMember(ctx, MemberAddrs{Raft: "h:1"}); return err }(),
		"bad port":  func() error { _, err := c.AddMember(ctx, MemberAddrs{Raft: "h:x", Client: "h:1"}); return err }(),
		"slash":     func() error { _, err := c.AddMember(ctx, MemberAddrs{Raft: "h:1", Client: "h/2:1"}); return err }(),
		"bad tls": func() error {
			_, err := c.AddMember(ctx, MemberAddrs{Raft: "h:1", Client: "h:2", TLS: "h"})
			return err
		}(),
		"remove 0":     c.RemoveMember(ctx, 0, false),
		"no priority":  c.SetMemberPriority(ctx, nil),
		"priority 0":   c.SetMemberPriority(ctx, []uint64{1, 0}),
		"priority dup": c.SetMemberPriority(ctx, []uint64{1, 2, 1}),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	s.nothing(100 * time.Millisecond)
}

// TestMemberAnswers: MOVED is followed; ERR unavailable is retried, for a
// while; refused and an old server's answer are told apart; a change whose
// connection is lost is not sent again.
func TestMemberAnswers(t *testing.T) {
	s, coordinator := startFake(t), startFake(t)
	c := newTestClientWith(t, []string{s.addr()}, WithFixedAddresses(), shortMemberWindow)
	ctx := ctxFor(t, 10*time.Second)
	remove := func() chan error { return memberCall(func() error { return c.RemoveMember(ctx, 3, false) }) }

	done := remove()
	req := s.next()
	reply(t, req.nc, "M - MOVED "+coordinator.addr())
	req = coordinator.next()
	if req.text != "M - REMOVE 3" {
		t.Fatalf("after MOVED: %q", req.text)
	}
	reply(t, req.nc, "M - ERR unavailable no leader right now")
	// The retry goes to another node first, which sends it back.
	req = s.next()
	if req.text != "M - REMOVE 3" {
		t.Fatalf("retry %q", req.text)
	}
	reply(t, req.nc, "M - MOVED "+coordinator.addr())
	req = coordinator.next()
	reply(t, req.nc, "M - OK")
	if err := recv(t, done); err != nil {
		t.Fatalf("remove after MOVED and ERR unavailable: %v", err)
	}

	done = remove()
	req = coordinator.next()
	reply(t, req.nc, "M - ERR refused the voters left would have no live majority: 2 of 3 live")
	err := recv(t, done)
	var se *ServerError
	if !errors.Is(err, ErrRefused) || errors.Is(err, ErrUnavailable) || !errors.As(err, &se) || se.Text != "the voters left would have no live majority: 2 of 3 live" {
		t.Fatalf("refused: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "baton: member remove: ") {
		t.Fatalf("error %q", err)
	}

	// ERR unavailable for longer than the window: given up.
	done = remove()
	start := time.Now()
	for stop := false; !stop; {
		select {
		case err = <-done:
			stop = true
		case l := <-coordinator.lines:
			reply(t, l.nc, "M - ERR unavailable no leader right now")
		case l := <-s.lines:
			reply(t, l.nc, "M - ERR unavailable no leader right now")
		case <-time.After(5 * time.Second):
			t.Fatal("remove went on retrying ERR unavailable")
		}
	}
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRefused) {
		t.Fatalf("unavailable: %v", err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before its window", el)
	}

	// A change whose connection is lost before the answer: not sent again.
	done = memberCall(func() error { _, err := c.AddMember(ctx, MemberAddrs{Raft: "h:1", Client: "h:2"}); return err })
	req = coordinator.next()
	req.nc.Close()
	if err := recv(t, done); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "may or may not") {
		t.Fatalf("add on a lost connection: %v", err)
	}
	coordinator.nothing(100 * time.Millisecond)
	s.nothing(0)

	// A list is read again on a lost connection.
	var members []Member
	done = memberCall(func() (err error) { members, err = c.ListMembers(ctx); return err })
	var l fakeLine
	select {
	case l = <-s.lines:
	case l = <-coordinator.lines:
	case <-time.After(5 * time.Second):
		t.Fatal("no list")
	}
	l.nc.Close()
	select {
	case l = <-s.lines:
	case l = <-coordinator.lines:
	case <-time.After(5 * time.Second):
		t.Fatal("list not sent again")
	}
	reply(t, l.nc, "M - OK 1/voter/a:1/a:2/-")
	if err := recv(t, done); err != nil || len(members) != 1 {
		t.Fatalf("list: %v, %v", members, err)
	}

	// An old server.
	old := startFake(t)
	oc := newTestClientWith(t, []string{old.addr()}, WithFixedAddresses())
	done = memberCall(func() error { _, err := oc.ListMembers(ctx); return err })
	req = old.next()
	reply(t, req.nc, oldServerAnswer)
	if err := recv(t, done); !errors.Is(err, ErrUnsupported) || errors.Is(err, ErrRefused) {
		t.Fatalf("old server: %v", err)
	}
	// ... whose connection is still good.
	if got := queryOn(t, oc, "k", old); got != old {
		t.Fatal("query")
	}
	if n := len(old.accepted()); n != 2 {
		t.Fatalf("%d connections to the old server, want 2", n)
	}
}
