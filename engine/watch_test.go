package engine

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	dbsm "github.com/lni/dragonboat/v4/statemachine"

	sm "github.com/baton-dev/baton/statemachine"
)

// watchStep is one step of a watch scenario: a request on the watching
// connection (line), or an entry of other clients' commands applied
// (cmds), and the lines the watching connection gets then, as regular
// expressions, in order; "$tok" in one stands for the key's holder's token
// after the step, "$tokN" for the N-th token the scenario granted.
type watchStep struct {
	line string
	cmds []sm.Command
	want []string
}

func grant(key string, leaseMs uint32, owner string) sm.Command {
	return sm.Command{Op: sm.OpGrant, Key: []byte(key), LeaseMs: leaseMs, Owner: []byte(owner)}
}

func release(key string, token uint64) sm.Command {
	return sm.Command{Op: sm.OpRelease, Key: []byte(key), Token: token}
}

// TestWatch: what a watching connection is sent, commit by commit, on a
// single node's serving shard (protocol 1.4, W and U).
func TestWatch(t *testing.T) {
	tests := []struct {
		name  string
		steps []watchStep
	}{
		{"free, granted, released", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{cmds: []sm.Command{grant("k", 10000, "o1")}, want: []string{`W k HELD $tok 10000 o1`}},
			{cmds: []sm.Command{release("k", 0)}, want: []string{`W k FREE`}},
		}},
		{"the state at once: held, with the time left", []watchStep{
			{cmds: []sm.Command{grant("k", 10000, "")}},
			{line: "W k", want: []string{`W k HELD $tok (9\d\d\d|10000)`}},
		}},
		{"a hand-off in one commit shows the new holder only", []watchStep{
			{cmds: []sm.Command{grant("k", 10000, "a")}},
			{line: "W k", want: []string{`W k HELD $tok1 \d+ a`}},
			{cmds: []sm.Command{release("k", 0), grant("k", 5000, "b")}, want: []string{`W k HELD $tok2 5000 b`}},
		}},
		{"a grant ended in its own commit still shows", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{cmds: []sm.Command{grant("k", 10000, "a"), release("k", 0)}, want: []string{`W k HELD $tok1 10000 a`, `W k FREE`}},
		}},
		{"an extend, a refused grant, another key: no line", []watchStep{
			{cmds: []sm.Command{grant("k", 10000, "a")}},
			{line: "W k", want: []string{`W k HELD $tok1 \d+ a`}},
			{cmds: []sm.Command{{Op: sm.OpExtend, Key: []byte("k"), Token: 0, LeaseMs: 1}, grant("k", 1, "x"), grant("other", 1, "")}},
			{line: "Q k", want: []string{`Q k HELD $tok1 \d+ a`}},
		}},
		{"two keys watched, one commit: a line each", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{line: "W j", want: []string{`W j FREE`}},
			{cmds: []sm.Command{grant("j", 100, ""), grant("k", 200, "")}, want: []string{`W j HELD \d+ 100`, `W k HELD \d+ 200`}},
		}},
		{"W again: the state again, one watch", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{line: "W k", want: []string{`W k FREE`}},
			{cmds: []sm.Command{grant("k", 100, "")}, want: []string{`W k HELD $tok 100`}},
		}},
		{"U: OK, then nothing", []watchStep{
			{line: "W k", want: []string{`W k FREE`}},
			{line: "U k", want: []string{`U k OK`}},
			{cmds: []sm.Command{grant("k", 100, "")}},
			{line: "U k", want: []string{`U k OK`}}, // not watched: OK all the same
			{line: "Q k", want: []string{`Q k HELD $tok \d+`}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testShard(t)
			cs := connTo(s)
			var toks []uint64
			seq := uint64(0)
			for i, st := range tt.steps {
				if st.line != "" {
					request(t, s, cs, st.line)
				}
				if st.cmds != nil {
					seq++
					// Another node's proposer: nothing of this node's waits
					// for the entry.
					for _, res := range applyCollect(s, entryOf(7, seq, false, st.cmds...)) {
						if res.Code == sm.Granted {
							toks = append(toks, res.Token)
						}
					}
				}
				tok, _ := holderOf(s, "k")
				got := answers(cs)
				if len(got) != len(st.want) {
					t.Fatalf("step %d: got %q, want %d lines %q", i, got, len(st.want), st.want)
				}
				for j, w := range st.want {
					for n := len(toks); n >= 1; n-- {
						w = strings.ReplaceAll(w, fmt.Sprintf("$tok%d", n), fmt.Sprint(toks[n-1]))
					}
					w = strings.ReplaceAll(w, "$tok", fmt.Sprint(tok))
					if !regexp.MustCompile("^" + w + "$").MatchString(got[j]) {
						t.Fatalf("step %d, line %d: %q, want %q (tokens granted %v)", i, j, got[j], w, toks)
					}
				}
			}
		})
	}
}

// applyCollect applies one entry's bytes to s's table, as applyEntry does,
// and returns the table's results.
func applyCollect(s *shard, data []byte) []sm.Result {
	tt := tableOf(s)
	tt.t.Helper()
	tt.index++
	if _, err := tt.sm.Update([]dbsm.Entry{{Index: tt.index, Cmd: data}}); err != nil {
		tt.t.Fatalf("update: %v", err)
	}
	return append([]sm.Result(nil), tt.obs.last...)
}

// TestWatchEnds: a watch ends with its connection, and with the node's
// serving of the shard (answered ERR unavailable while nobody is known to
// lead); the counts of the limits go back to nothing.
func TestWatchEnds(t *testing.T) {
	s := testShard(t)
	cs, other := connTo(s), connTo(s)
	request(t, s, cs, "W k")
	request(t, s, other, "W k")
	request(t, s, other, "W j")
	answers(cs)
	answers(other)
	if n := s.node.adm.watches.Load(); n != 3 {
		t.Fatalf("%d watches counted, want 3", n)
	}
	s.node.closeConn(other)
	if n := s.node.adm.watches.Load(); n != 1 || watchesOf(s, "k") != 1 || s.watches["j"] != nil {
		t.Fatalf("after a connection's end: %d watches counted, shard's %v; want 1, k's", n, s.watches)
	}
	s.leaderUpdated(0)
	if got := answers(cs); len(got) != 1 || !strings.HasPrefix(got[0], "W k ERR unavailable") {
		t.Fatalf("the end of serving sent %q; want W k ERR unavailable", got)
	}
	applyCollect(s, entryOf(7, 1, false, grant("k", 100, "")))
	if got := answers(cs); got != nil {
		t.Fatalf("a change after the watch ended sent %q", got)
	}
	if n := s.node.adm.watches.Load(); n != 0 || len(s.watches) != 0 {
		t.Fatalf("%d watches counted, shard's %v; want none", n, s.watches)
	}
}

// TestWatchLimits: past MaxWatchesPerConn or MaxWatches, W is answered ERR
// overloaded and watches nothing.
func TestWatchLimits(t *testing.T) {
	l := DefaultLimits()
	l.MaxWatchesPerConn, l.MaxWatches = 2, 3
	s := limitedShard(t, l)
	a, b := connTo(s), connTo(s)
	for _, step := range []struct {
		cs   *connState
		line string
		want string
	}{
		{a, "W k1", "W k1 FREE"},
		{a, "W k2", "W k2 FREE"},
		{a, "W k2", "W k2 FREE"}, // a watch it has: no new one
		{a, "W k3", "W k3 ERR overloaded too many watches on this connection (2)"},
		{b, "W k1", "W k1 FREE"},
		{b, "W k4", "W k4 ERR overloaded too many watches on this node (3), retry later"},
		{a, "U k1", "U k1 OK"},
		{b, "W k4", "W k4 FREE"},
	} {
		request(t, s, step.cs, step.line)
		if got := answers(step.cs); len(got) != 1 || got[0] != step.want {
			t.Fatalf("%s: %q, want %q", step.line, got, step.want)
		}
	}
}

// TestWatcherThatDoesNotRead: a watcher whose lines pile up is cut off by
// MaxUnsentPerConn, like any client that does not read, and its watches
// end with its connection; a watcher that reads is served throughout.
func TestWatcherThatDoesNotRead(t *testing.T) {
	l := DefaultLimits()
	l.MaxUnsentPerConn = 200
	s := limitedShard(t, l)
	idle, reader := connTo(s), connTo(s)
	request(t, s, idle, "W k")
	request(t, s, reader, "W k")
	answers(reader)
	var token uint64
	for i := range 20 {
		cmd := grant("k", 1000, "")
		if i%2 == 1 {
			cmd = release("k", token)
		}
		for _, res := range applyCollect(s, entryOf(7, uint64(i+1), false, cmd)) {
			if res.Code == sm.Granted {
				token = res.Token
			}
		}
		if got := answers(reader); len(got) != 1 {
			t.Fatalf("change %d: the reading watcher got %q, want one line", i, got)
		}
	}
	if limit, cut := idle.cutOffBy(); !cut || limit != limitUnsentPerConn {
		t.Fatalf("the watcher that does not read: cut %v by %v, want cut by MaxUnsentPerConn", cut, limit)
	}
	s.node.closeConn(idle) // what its loop does once it is cut off
	if n := watchesOf(s, "k"); n != 1 || s.node.adm.watches.Load() != 1 {
		t.Fatalf("after the cut-off: %d watches of k, %d counted; want the reader's alone", n, s.node.adm.watches.Load())
	}
}

// watchesOf counts the shard's watches of key.
func watchesOf(s *shard, key string) (n int) {
	for w := s.watches[key]; w != nil; w = w.next {
		n++
	}
	return n
}

// TestWatchersOfOneKey: several connections watch one key; one that
// leaves (U, first, middle or last in the shard's list) gets no more
// lines, the others each get theirs.
func TestWatchersOfOneKey(t *testing.T) {
	for leaving := range 3 {
		s := testShard(t)
		cs := []*connState{connTo(s), connTo(s), connTo(s)}
		for _, c := range cs {
			request(t, s, c, "W k")
			answers(c)
		}
		request(t, s, cs[leaving], "U k")
		answers(cs[leaving])
		applyCollect(s, entryOf(7, 1, false, grant("k", 100, "")))
		for i, c := range cs {
			got := answers(c)
			if want := i != leaving; (len(got) == 1) != want {
				t.Fatalf("watcher %d, watcher %d having left: %q", i, leaving, got)
			}
		}
		if n := watchesOf(s, "k"); n != 2 {
			t.Fatalf("%d watches of k listed, want 2", n)
		}
	}
}
