package chaos

import (
	"bufio"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeMember serves M requests with answers from script, one connection
// each, in order; the last answer repeats.
func fakeMember(t *testing.T, script ...string) (addr string, got chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got = make(chan string, 100)
	go func() {
		for i := 0; ; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			got <- strings.TrimSpace(line)
			c.Write([]byte(script[min(i, len(script)-1)] + "\n"))
			c.Close()
		}
	}()
	return l.Addr().String(), got
}

// TestMemberRequest: MOVED is followed, ERR unavailable and refusals are
// retried, a refusal final accepts ends it, and ERR badrequest is an
// error at once.
func TestMemberRequest(t *testing.T) {
	leader, leaderGot := fakeMember(t, "M - ERR refused another change is under way", "M - OK 7")
	follower, _ := fakeMember(t, "M - ERR unavailable no leader", "M - MOVED "+leader)
	f, err := memberRequest([]string{follower}, "ADD a/b", 10*time.Second, nil)
	if err != nil || !reflect.DeepEqual(f, []string{"OK", "7"}) {
		t.Fatalf("memberRequest: %v, %v; want OK 7", f, err)
	}
	if n := len(leaderGot); n != 2 || <-leaderGot != "M - ADD a/b" {
		t.Errorf("the leader got %d requests, want 2 of M - ADD a/b", n)
	}

	refuser, _ := fakeMember(t, "M - ERR refused address a is member 4's")
	f, err = memberRequest([]string{refuser}, "ADD a/b", 10*time.Second, func(f []string) bool { return ownedBy(f, "a", "b") > 0 })
	if err != nil || ownedBy(f, "a", "b") != 4 {
		t.Errorf("a refusal final accepts: %v, %v; want the answer naming member 4", f, err)
	}
	if ownedBy(f, "x", "y") != 0 || ownedBy([]string{"OK", "4"}, "a", "b") != 0 {
		t.Error("ownedBy took another address's refusal, or an OK, for a member")
	}
	if _, err := memberRequest([]string{refuser}, "ADD a/b", 600*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "is member 4's") {
		t.Errorf("a refusal retried past the bound: %v; want an error naming the last answer", err)
	}
	bad, _ := fakeMember(t, "M - ERR badrequest unknown member verb")
	if _, err := memberRequest([]string{bad}, "JUMP", 10*time.Second, nil); err == nil {
		t.Error("ERR badrequest: no error")
	}
}

// TestRoleOf reads a member's role from M - LIST.
func TestRoleOf(t *testing.T) {
	list := []string{"1/voter/r1/c1/-", "4/learner/r4/c4/-"}
	if roleOf(list, 4) != "learner" || roleOf(list, 1) != "voter" || roleOf(list, 2) != "" {
		t.Errorf("roleOf %v: 4 %q, 1 %q, 2 %q", list, roleOf(list, 4), roleOf(list, 1), roleOf(list, 2))
	}
}
