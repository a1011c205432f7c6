package seglog

import "sort"

// loc is where an entry's pb.Entry encoding is: segment, offset, length.
type loc struct {
	seg uint64
	off uint32
	n   uint32
}

func (l loc) pos() uint64 { return position(l.seg, int64(l.off)) }

// run is a stretch of consecutive entries: locs[k] is entry first+k.
type run struct {
	first uint64
	locs  []loc
}

// end is one past the run's last index.
func (r *run) end() uint64 { return r.first + uint64(len(r.locs)) }

// runs are a replica's stored entries, in index order, apart and not
// adjacent (adjacent runs are merged). Raft keeps a replica's log
// contiguous, so there is one run almost always; gaps appear only when
// entries are saved past a hole (tests do), or below the first run after
// a snapshot.
type runs []run

// find returns the position of the first run that ends at or after i
// (run.end() >= i), so the run that holds i, or the one i would extend.
func (rs runs) find(i uint64) int {
	return sort.Search(len(rs), func(k int) bool { return rs[k].end() >= i })
}

// get returns entry i's location.
func (rs runs) get(i uint64) (loc, bool) {
	k := rs.find(i)
	if k < len(rs) && rs[k].first <= i && i < rs[k].end() {
		return rs[k].locs[i-rs[k].first], true
	}
	return loc{}, false
}

// set stores entry i's location and returns the one it replaces, if any.
func (rs *runs) set(i uint64, l loc) (loc, bool) {
	k := rs.find(i)
	if k < len(*rs) {
		r := &(*rs)[k]
		switch {
		case r.first <= i && i < r.end():
			old := r.locs[i-r.first]
			r.locs[i-r.first] = l
			return old, true
		case i == r.end():
			r.locs = append(r.locs, l)
			if k+1 < len(*rs) && (*rs)[k+1].first == i+1 {
				r.locs = append(r.locs, (*rs)[k+1].locs...)
				*rs = append((*rs)[:k+1], (*rs)[k+2:]...)
			}
			return loc{}, false
		case i+1 == r.first:
			// The run before ends below i-1 (find), so nothing to merge.
			r.locs = append([]loc{l}, r.locs...)
			r.first = i
			return loc{}, false
		}
	}
	*rs = append(*rs, run{})
	copy((*rs)[k+1:], (*rs)[k:])
	(*rs)[k] = run{first: i, locs: []loc{l}}
	return loc{}, false
}

// dropTo removes the entries up to and including i, calling dropped for
// each.
func (rs *runs) dropTo(i uint64, dropped func(loc)) {
	n := 0
	for ; n < len(*rs); n++ {
		r := &(*rs)[n]
		if r.first > i {
			break
		}
		if r.end()-1 > i {
			cut := i - r.first + 1
			for _, l := range r.locs[:cut] {
				dropped(l)
			}
			r.locs = r.locs[cut:]
			r.first = i + 1
			break
		}
		for _, l := range r.locs {
			dropped(l)
		}
	}
	*rs = append((*rs)[:0], (*rs)[n:]...)
}

// filter keeps the entries keep accepts and calls dropped for the others.
func (rs *runs) filter(keep func(i uint64, l loc) bool, dropped func(loc)) {
	var out runs
	for _, r := range *rs {
		start := -1
		for k, l := range r.locs {
			if keep(r.first+uint64(k), l) {
				if start < 0 {
					start = k
				}
				continue
			}
			dropped(l)
			if start >= 0 {
				out = append(out, run{first: r.first + uint64(start), locs: r.locs[start:k:k]})
				start = -1
			}
		}
		if start >= 0 {
			out = append(out, run{first: r.first + uint64(start), locs: r.locs[start:]})
		}
	}
	*rs = out
}

// lowestFrom returns the lowest stored index in [from, last].
func (rs runs) lowestFrom(from, last uint64) (uint64, bool) {
	k := rs.find(from + 1) // the first run that ends past from
	if k == len(rs) {
		return 0, false
	}
	i := max(from, rs[k].first)
	return i, i <= last
}
