package seglog

import "testing"

// runsOf lists the runs as [first, last] pairs.
func runsOf(rs runs) [][2]uint64 {
	out := [][2]uint64{}
	for _, r := range rs {
		out = append(out, [2]uint64{r.first, r.end() - 1})
	}
	return out
}

func TestRuns(t *testing.T) {
	at := func(i uint64) loc { return loc{seg: 1, off: uint32(i), n: 1} }
	tests := []struct {
		name   string
		set    []uint64
		dropTo uint64 // 0: none
		want   [][2]uint64
	}{
		{"one run", []uint64{1, 2, 3}, 0, [][2]uint64{{1, 3}}},
		{"gap", []uint64{1, 2, 4, 5}, 0, [][2]uint64{{1, 2}, {4, 5}}},
		{"gap filled merges", []uint64{1, 2, 4, 5, 3}, 0, [][2]uint64{{1, 5}}},
		{"prepend", []uint64{5, 6, 4}, 0, [][2]uint64{{4, 6}}},
		{"below with a gap", []uint64{5, 6, 2}, 0, [][2]uint64{{2, 2}, {5, 6}}},
		{"overwrite", []uint64{1, 2, 3, 2, 1}, 0, [][2]uint64{{1, 3}}},
		{"drop a prefix", []uint64{1, 2, 3, 4}, 2, [][2]uint64{{3, 4}}},
		{"drop a whole run", []uint64{1, 2, 5, 6}, 3, [][2]uint64{{5, 6}}},
		{"drop everything", []uint64{1, 2, 5, 6}, ^uint64(0), [][2]uint64{}},
		{"drop at a run's end", []uint64{1, 2, 5, 6}, 2, [][2]uint64{{5, 6}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs runs
			live := 0
			for _, i := range tt.set {
				if _, replaced := rs.set(i, at(i)); !replaced {
					live++
				}
			}
			if tt.dropTo != 0 {
				rs.dropTo(tt.dropTo, func(loc) { live-- })
			}
			equal(t, "runs", runsOf(rs), tt.want)
			n := 0
			for _, w := range tt.want {
				n += int(w[1] - w[0] + 1)
				for i := w[0]; i <= w[1]; i++ {
					if l, ok := rs.get(i); !ok || l != at(i) {
						t.Fatalf("get(%d) = %v, %v", i, l, ok)
					}
				}
			}
			if live != n {
				t.Fatalf("%d live after the drops' callbacks, %d stored", live, n)
			}
		})
	}
}

func TestRunsFilterAndLowest(t *testing.T) {
	var rs runs
	for i := uint64(1); i <= 10; i++ {
		rs.set(i, loc{seg: 1 + i%2, off: uint32(i), n: 1})
	}
	var dropped []uint64
	rs.filter(func(i uint64, l loc) bool { return i <= 3 || i >= 8 }, func(l loc) { dropped = append(dropped, uint64(l.off)) })
	equal(t, "runs", runsOf(rs), [][2]uint64{{1, 3}, {8, 10}})
	equal(t, "dropped", dropped, []uint64{4, 5, 6, 7})
	// The runs do not share their arrays in a way an append could break.
	rs.set(4, loc{seg: 9, n: 1})
	if l, _ := rs.get(8); l.seg == 9 {
		t.Fatal("an append to the first run overwrote the second")
	}
	tests := []struct {
		from, last, want uint64
		ok               bool
	}{
		{0, 10, 1, true}, {4, 10, 4, true}, {5, 10, 8, true}, {5, 7, 0, false}, {11, 20, 0, false}, {9, 9, 9, true},
	}
	for _, tt := range tests {
		got, ok := rs.lowestFrom(tt.from, tt.last)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("lowestFrom(%d, %d) = %d, %v; want %d, %v", tt.from, tt.last, got, ok, tt.want, tt.ok)
		}
	}
}
