package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A synthetic round: node 1 leads shard 1; entry (seq 8, index 100) is
// read at 1000 µs, and every later event of it is placed so that each
// stage takes a known time. Node 3's ack comes back first, so node 3 is
// the follower that counts; node 2 is slower.
const leaderTrace = `# stagetrace pid 1 every 4 clock_error_ns 40
node 1
read 1 77 8 0 0 1000000
propose 1 77 8 0 0 1010000
sent 1 77 8 100 2 1030000
sent 1 77 8 100 3 1031000
save 1 77 8 100 0 1040000
write 1 77 8 100 0 1050000
sync 1 77 8 100 0 1200000
ackrecv 1 0 0 99 3 1100000
ackrecv 1 0 0 100 2 1500000
ackrecv 1 0 0 100 3 1400000
commit 1 77 8 100 0 1420000
update 1 77 8 100 0 1435000
apply 1 77 8 100 0 1450000
answer 1 77 8 100 0 1460000
read 1 77 12 0 0 9000000000
propose 1 77 12 0 0 9000010000
`

const follower3 = `node 3
recv 1 77 8 100 1 1060000
save 1 77 8 100 0 1070000
write 1 77 8 100 0 1080000
sync 1 77 8 100 0 1300000
acksent 1 0 0 99 1 1090000
acksent 1 0 0 100 1 1350000
commit 1 77 8 100 0 1600000
`

const follower2 = `node 2
recv 1 77 8 100 1 1100000
save 1 77 8 100 0 1110000
write 1 77 8 100 0 1120000
sync 1 77 8 100 0 1400000
acksent 1 0 0 100 1 1450000
`

func writeRound(t *testing.T, traces ...string) string {
	dir := t.TempDir()
	for i, tr := range traces {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("stages-%d.txt", i+1)), []byte(tr), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestJoinPicksTheFirstAck(t *testing.T) {
	r, err := readRound(writeRound(t, leaderTrace, follower2, follower3))
	if err != nil {
		t.Fatal(err)
	}
	j := join(r)
	// seq 12 was proposed but never replicated: not a path.
	if len(j.paths) != 1 || j.incomplete != 1 {
		t.Fatalf("%d paths, %d incomplete; want 1 and 1", len(j.paths), j.incomplete)
	}
	p := j.paths[0]
	want := path{
		read: 1000000, propose: 1010000,
		lSave: 1040000, lWrite: 1050000, lSync: 1200000,
		sent: 1031000, recv: 1060000,
		fSave: 1070000, fWrite: 1080000, fSync: 1300000,
		// The ack of 99 at 1090 µs does not cover index 100; the one
		// sent at 1350 does, and is received at 1400.
		ackSent: 1350000, ackRecv: 1400000,
		commit: 1420000, update: 1435000, apply: 1450000, answer: 1460000,
		index: 100, follower: 3,
	}
	if p != want {
		t.Fatalf("path\n%+v\nwant\n%+v", p, want)
	}
	got := map[string]float64{}
	for _, st := range stages {
		got[st.name] = measure(st, j.paths).p50 / 1000
	}
	for name, us := range map[string]float64{
		"read and parsed, to proposed":                                      10,
		"proposed, to the leader's step saving it":                          30,
		"leader's log write":                                                10,
		"leader's flush (fdatasync)":                                        150,
		"proposed, to sent to the follower":                                 21,
		"follower's receipt":                                                29,
		"received, to the follower's step saving it":                        10,
		"follower's log write":                                              10,
		"follower's flush (fdatasync)":                                      220,
		"flushed, to the follower's ack sent":                               50,
		"ack's receipt":                                                     50,
		"commit (from the ack, or the leader's flush if later)":             20,
		"commit, to the state machine's Update (dragonboat's apply worker)": 15,
		"Update, to applied to the table":                                   15,
		"applied, to the answer written":                                    10,
		"total: read to answer written":                                     460,
	} {
		if got[name] != us {
			t.Errorf("%s: %v µs, want %v", name, got[name], us)
		}
	}
}

// The window keeps out entries proposed before or after the load.
func TestJoinWindow(t *testing.T) {
	dir := writeRound(t, leaderTrace, follower2, follower3)
	if err := os.WriteFile(filepath.Join(dir, "window"), []byte("1011000 2000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readRound(dir)
	if err != nil {
		t.Fatal(err)
	}
	if j := join(r); len(j.paths) != 0 {
		t.Fatalf("%d paths proposed outside the window", len(j.paths))
	}
}

func TestFirstAck(t *testing.T) {
	acks := []ack{{10, 5}, {20, 7}, {30, 6}, {40, 9}}
	for _, c := range []struct {
		index uint64
		after int64
		want  int64
	}{
		{5, 0, 10}, {6, 0, 20}, {6, 21, 30}, {8, 0, 40}, {10, 0, 0}, {5, 41, 0},
	} {
		if got := firstAck(acks, c.index, c.after); got != c.want {
			t.Errorf("firstAck(index %d, after %d) = %d, want %d", c.index, c.after, got, c.want)
		}
	}
}

func TestPercentileAndMedian(t *testing.T) {
	v := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(v, 0.5); p != 5 {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(v, 0.9); p != 9 {
		t.Errorf("p90 = %v", p)
	}
	if p := percentile([]int64{7}, 0.9); p != 7 {
		t.Errorf("p90 of one = %v", p)
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("p50 of nothing is not NaN")
	}
	if m := median([]float64{3, math.NaN(), 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of four = %v", m)
	}
}

// Over several rounds a stage's figure is the median of the rounds' p50s.
func TestSummarizeRounds(t *testing.T) {
	mk := func(readToPropose ...int64) joined {
		var j joined
		for _, d := range readToPropose {
			j.paths = append(j.paths, path{read: 1000, propose: 1000 + d})
		}
		return j
	}
	c := column{name: "x", rounds: []joined{mk(10, 20, 30), mk(100, 200, 300), mk(1, 2, 3)}}
	s := summarize(stages[0], c)
	if s.p50 != 20 || s.p90 != 30 || s.minN != 3 {
		t.Fatalf("summary %+v; want p50 20 (median of 20, 200, 2), p90 30, n 3", s)
	}
	var out bytes.Buffer
	writeReport(&out, []column{c})
	if !strings.Contains(out.String(), "| read and parsed, to proposed | 0 | 0 |") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestParseTraceRejectsGarbage(t *testing.T) {
	for _, bad := range []string{"sent 1 2 3\n", "bogus 1 2 3 4 5 6\n", "read 1 2 3 4 5 x\n", "node x\n"} {
		if _, err := parseTrace(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestTimeFlushes(t *testing.T) {
	d, err := timeFlushes(t.TempDir(), 5, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 5 || d[0] <= 0 {
		t.Fatalf("%v", d)
	}
}

// The leader's clock reading of a send can come late (its goroutine
// descheduled after the write), even after the follower's ack: that does
// not change which ack covers the entry.
func TestJoinLateSend(t *testing.T) {
	late := strings.Replace(leaderTrace, "sent 1 77 8 100 3 1031000", "sent 1 77 8 100 3 1450000", 1)
	r, err := readRound(writeRound(t, late, follower2, follower3))
	if err != nil {
		t.Fatal(err)
	}
	j := join(r)
	if len(j.paths) != 1 {
		t.Fatalf("%d paths", len(j.paths))
	}
	if p := j.paths[0]; p.follower != 3 || p.ackSent != 1350000 || p.ackRecv != 1400000 || p.sent != 1450000 {
		t.Fatalf("path %+v: want follower 3, its ack sent at 1350 µs and received at 1400, sent at 1450", p)
	}
}
