package chaos

import (
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDrawSchedule: a seed always draws the same schedule; the schedule
// covers the duration with one fault at a time, each pause and hold within
// its bounds, and uses every kind.
func TestDrawSchedule(t *testing.T) {
	draw := func(seed uint64, d time.Duration) []Fault {
		return DrawSchedule(rand.New(rand.NewPCG(seed, 0)), d, true)
	}
	if a, b := draw(42, time.Minute), draw(42, time.Minute); !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed drew two schedules")
	}
	if reflect.DeepEqual(draw(42, time.Minute), draw(43, time.Minute)) {
		t.Error("two seeds drew the same schedule")
	}
	// A shorter run replays the start of a longer one: what regression
	// seeds rely on.
	if short, long := draw(42, time.Minute), draw(42, 10*time.Minute); !reflect.DeepEqual(short, long[:len(short)]) {
		t.Error("a shorter run of a seed is not a prefix of a longer one")
	}
	bounds := make(map[FaultKind][2]time.Duration)
	for _, m := range faultMix {
		bounds[m.kind] = [2]time.Duration{m.min, m.max}
	}
	s := draw(7, 30*time.Minute)
	seen := make(map[FaultKind]bool)
	var planned time.Duration
	for _, f := range s {
		b, ok := bounds[f.Kind]
		if !ok {
			t.Fatalf("unknown kind in %v", f)
		}
		if f.Hold < b[0] || f.Hold > b[1] || f.Before < minGap || f.Before > maxGap || f.Pick < 0 {
			t.Errorf("out of bounds: %v", f)
		}
		seen[f.Kind] = true
		planned += f.Before + f.Hold
	}
	if planned < 30*time.Minute || len(s) > maxFaults {
		t.Errorf("%d faults planned for %v, want at least 30m and at most %d faults", len(s), planned, maxFaults)
	}
	if len(seen) != len(faultMix) {
		t.Errorf("30 minutes drew only %d of %d kinds", len(seen), len(faultMix))
	}
	if draw(1, 0) != nil {
		t.Error("a run of no time drew faults")
	}
}

// TestDrawScheduleWithoutMembership: without the membership faults a seed
// draws none of them, and the schedule it drew before they existed: the
// regression seeds found then replay their faults.
func TestDrawScheduleWithoutMembership(t *testing.T) {
	s := DrawSchedule(rand.New(rand.NewPCG(1796119039556610740, 0)), 20*time.Second, false)
	// As drawn by the schedule of commit 946e700, before the membership
	// faults (which drew these four only): the third is the isolate-leader
	// that found a bug.
	want := []FaultKind{IsolateFollower, CutToLeader, IsolateLeader, CutFromLeader}
	var got []FaultKind
	for _, f := range s[:min(len(s), len(want))] {
		got = append(got, f.Kind)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("seed 1796119039556610740 without membership faults drew %v, want %v", got, want)
	}
	for _, f := range DrawSchedule(rand.New(rand.NewPCG(7, 0)), 30*time.Minute, false) {
		if isMembership(f.Kind) {
			t.Fatalf("a schedule without membership faults drew %v", f)
		}
	}
	var member int
	for _, f := range DrawSchedule(rand.New(rand.NewPCG(7, 0)), 30*time.Minute, true) {
		if isMembership(f.Kind) {
			member++
		}
	}
	if member == 0 {
		t.Error("30 minutes with membership faults drew none")
	}
}

// TestConnNodes: a connection goes to the node that held its address when
// it sent its first request, a member rebuilt in place handing its
// addresses on to its successor.
func TestConnNodes(t *testing.T) {
	owners := []addrOwner{{"a", 1, 0}, {"b", 2, 0}, {"a", 4, 10 * time.Second}, {"c", 5, 20 * time.Second}}
	addrs := map[int]string{1: "a", 2: "a", 3: "b", 4: "c", 5: "a"}
	history := []Op{{Conn: 1, Call: time.Second}, {Conn: 2, Call: 11 * time.Second}, {Conn: 3, Call: 12 * time.Second}, {Conn: 4, Call: 19 * time.Second}}
	got := connNodes(addrs, history, owners)
	want := map[int]int{1: 1, 2: 4, 3: 2, 4: 5, 5: 4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("connNodes: %v, want %v", got, want)
	}
}

// TestQueryAll: the answers are filed under their keys, whatever their
// order, and a server that answers only some says so.
func TestQueryAll(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				var got string
				for strings.Count(got, "\n") < 3 {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got += string(buf[:n])
				}
				if strings.Contains(got, "Q gone") {
					c.Write([]byte("Q b FREE\n"))
					return
				}
				c.Write([]byte("Q c MOVED 127.0.0.1:1\nQ a HELD 1025 300\nQ b FREE\n"))
			}()
		}
	}()
	got, err := queryAll(l.Addr().String(), []string{"a", "b", "c"}, 5*time.Second)
	want := []string{"Q a HELD 1025 300", "Q b FREE", "Q c MOVED 127.0.0.1:1"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("queryAll: %q, %v; want %q", got, err, want)
	}
	if leads(l.Addr().String(), []string{"a", "b", "c"}) != 2 {
		t.Error("leads: want 2 keys answered as a leader")
	}
	got, err = queryAll(l.Addr().String(), []string{"gone", "b", "x"}, 5*time.Second)
	if err == nil || got[1] != "Q b FREE" || got[0] != "" {
		t.Errorf("a partial answer: %q, %v", got, err)
	}
}
