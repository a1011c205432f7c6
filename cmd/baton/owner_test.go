package main

// Owners in the lock commands, against a scripted server: the owner
// acquire and lock name, --owner, and what query shows of the holder's.

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/codec"
)

// scriptedServer answers every request line with answer(line) and keeps
// the lines it got; heartbeats (client.HeartbeatKey) it answers FREE and
// does not keep.
type scriptedServer struct {
	ln     net.Listener
	answer func(line string) string

	mu    sync.Mutex
	lines []string
}

func startScripted(t *testing.T, answer func(line string) string) *scriptedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedServer{ln: ln, answer: answer}
	// conns counts the accept loop too, so that its Add of a connection
	// never meets the cleanup's Wait at a count of zero (a race).
	var conns sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
	})
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer nc.Close()
				sc := bufio.NewScanner(nc)
				for sc.Scan() {
					line := sc.Text()
					out := "Q " + client.HeartbeatKey + " FREE"
					if line != "Q "+client.HeartbeatKey {
						s.mu.Lock()
						s.lines = append(s.lines, line)
						s.mu.Unlock()
						out = s.answer(line)
					}
					if _, err := nc.Write([]byte(out + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *scriptedServer) addr() string { return s.ln.Addr().String() }

// got returns the lines received so far.
func (s *scriptedServer) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// grantAll answers as a server on which every lock is free: A is granted
// token 7, K and R find it held, Q answers query.
func grantAll(query string) func(string) string {
	return func(line string) string {
		f := strings.Fields(line)
		switch f[0] {
		case "A":
			return "A " + f[1] + " OK 7"
		case "Q":
			return query
		}
		return f[0] + " " + f[1] + " OK"
	}
}

// acquireOwner returns the owner of the only acquire in lines.
func acquireOwner(t *testing.T, lines []string) string {
	t.Helper()
	var owners []string
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == "A" {
			if len(f) != 5 {
				t.Fatalf("acquire %q names no owner", l)
			}
			owners = append(owners, f[4])
		}
	}
	if len(owners) != 1 {
		t.Fatalf("requests %q: want one acquire", lines)
	}
	return owners[0]
}

// TestAcquireOwner: acquire names the owner of --owner (and renews the
// lease of the grant it gets, which may be that owner's older one), or by
// default a fresh one after HOST:PID:; --json shows it.
func TestAcquireOwner(t *testing.T) {
	prefix := ownerPrefix()
	for _, tc := range []struct {
		args  []string
		owner string // "": a random one after prefix
		lines []string
	}{
		{[]string{"acquire", "k", "--json"}, "", []string{"A k 10000 0 "}},
		{[]string{"acquire", "k", "--owner", "job-17", "--json"}, "job-17", []string{"A k 10000 0 job-17", "K k 7 10000"}},
		{[]string{"acquire", "--owner=é:1", "k", "--wait", "-1", "--json"}, "é:1", []string{"A k 10000 -1 é:1", "K k 7 10000"}},
	} {
		s := startScripted(t, grantAll(""))
		code, out, errs := runArgs(t, map[string]string{"BATON_ADDR": s.addr()}, tc.args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		}
		lines := s.got()
		owner := acquireOwner(t, lines)
		if tc.owner != "" && owner != tc.owner {
			t.Errorf("%v: owner %q, want %q", tc.args, owner, tc.owner)
		}
		if tc.owner == "" && (!strings.HasPrefix(owner, prefix) || len(owner) != len(prefix)+32 || !codec.ValidOwner([]byte(owner))) {
			t.Errorf("%v: owner %q, want %s and 32 hex digits", tc.args, owner, prefix)
		}
		if len(lines) != len(tc.lines) {
			t.Fatalf("%v: requests %q, want %q", tc.args, lines, tc.lines)
		}
		for i, want := range tc.lines {
			if !strings.HasPrefix(lines[i], want) {
				t.Errorf("%v: request %q, want %q", tc.args, lines[i], want)
			}
		}
		var a struct {
			Acquired bool   `json:"acquired"`
			Token    uint64 `json:"token"`
			Owner    string `json:"owner"`
		}
		if err := json.Unmarshal([]byte(out), &a); err != nil || !a.Acquired || a.Token != 7 || a.Owner != owner {
			t.Errorf("%v: stdout %q (%v), want token 7 of owner %q", tc.args, out, err, owner)
		}
	}
}

// TestLockOwner: baton lock names an owner after HOST:PID: too.
func TestLockOwner(t *testing.T) {
	s := startScripted(t, grantAll(""))
	code, _, errs := runArgs(t, map[string]string{"BATON_ADDR": s.addr()}, "lock", "k", "--", "true")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if owner := acquireOwner(t, s.got()); !strings.HasPrefix(owner, ownerPrefix()) {
		t.Fatalf("owner %q, want %s...", owner, ownerPrefix())
	}
}

// TestQueryShowsOwner: query prints the holder's owner, in text and JSON.
func TestQueryShowsOwner(t *testing.T) {
	for _, tc := range []struct {
		answer string
		text   string
		json   string
	}{
		{"Q k HELD 7 9400 web-3:4121:9f86d081884c7d659a2feaa0c55ad015",
			"k: held by token 7 (owner web-3:4121:9f86d081884c7d659a2feaa0c55ad015), 9.4s of lease left",
			`{"held":true,"key":"k","owner":"web-3:4121:9f86d081884c7d659a2feaa0c55ad015","remaining_ms":9400,"token":7}`},
		{"Q k HELD 7 9400", "k: held by token 7, 9.4s of lease left",
			`{"held":true,"key":"k","owner":"","remaining_ms":9400,"token":7}`},
		{"Q k FREE", "k: free", `{"held":false,"key":"k"}`},
	} {
		s := startScripted(t, grantAll(tc.answer))
		env := map[string]string{"BATON_ADDR": s.addr()}
		if code, out, errs := runArgs(t, env, "query", "k"); code != exitOK || strings.TrimSpace(out) != tc.text {
			t.Errorf("%q: query printed %q (exit %d, %s), want %q", tc.answer, out, code, errs, tc.text)
		}
		if code, out, errs := runArgs(t, env, "query", "k", "--json"); code != exitOK || strings.TrimSpace(out) != tc.json {
			t.Errorf("%q: query --json printed %q (exit %d, %s), want %s", tc.answer, out, code, errs, tc.json)
		}
	}
}

// TestOwnerPrefix: HOST:PID: always makes a prefix the client takes,
// whatever the host name.
func TestOwnerPrefix(t *testing.T) {
	for _, tc := range []struct {
		host string
		pid  int
		want string
	}{
		{"web-3", 4121, "web-3:4121:"},
		{"", 1, "unknown-host:1:"},
		{"a b\tc\x7f", 2, "a_b_c_:2:"},
		{strings.Repeat("h", 40), 4194304, strings.Repeat("h", client.MaxOwnerPrefix-len(":4194304:")) + ":4194304:"},
		{strings.Repeat("é", 20), 999, strings.Repeat("é", 13) + ":999:"}, // 27 bytes of room: cut between characters, not inside one
		{"bad\xffutf8", 5, "bad_utf8:5:"},
	} {
		got := ownerPrefixOf(tc.host, tc.pid)
		if got != tc.want {
			t.Errorf("ownerPrefixOf(%q, %d) = %q, want %q", tc.host, tc.pid, got, tc.want)
		}
		if c, err := client.New([]string{"127.0.0.1:1"}, client.WithOwnerPrefix(got)); err != nil {
			t.Errorf("prefix %q: %v", got, err)
		} else {
			c.Close()
		}
	}
	host, _ := os.Hostname()
	if got, want := ownerPrefix(), ownerPrefixOf(host, os.Getpid()); got != want {
		t.Errorf("ownerPrefix() = %q on host %q, want %q", got, host, want)
	}
}
