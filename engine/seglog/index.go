package seglog

import (
	"fmt"
	"slices"
	"sync"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// replica is everything the store knows about one replica. The log files
// hold it all; this is their in-memory index, rebuilt by Open.
type replica struct {
	// Metadata, as the log says it is. bootstrap and snapshot are kept
	// encoded and decoded on each read, so callers never share maps.
	bootstrap    []byte
	hasBootstrap bool
	state        pb.State
	hasState     bool
	snapshot     []byte
	snapIndex    uint64
	hasSnap      bool
	maxIndex     uint64
	hasMax       bool

	// floor and floorPos are the replica's last RemoveEntriesTo: entries
	// up to floor written before floorPos are removed. resetPos is the
	// position of its last RemoveNodeData: everything written before it
	// is gone. Checkpoints carry them, so that entries in older segments
	// that these removed stay removed when Open replays those segments
	// without the records that removed them.
	floor, floorPos uint64
	resetPos        uint64

	entries runs

	// saved is the last State this process wrote for the replica;
	// savedSinceOpen is false until the first (and after RemoveNodeData),
	// so the first State after an open is always synced (see the sync
	// policy in the package documentation).
	saved          pb.State
	savedSinceOpen bool
}

// index is the in-memory index of the log: the replicas, and how many live
// entries each segment holds (a segment with none can be retired once a
// newer checkpoint is durable).
type index struct {
	// mu guards the fields below. Writers hold it only to apply a record
	// just written (under LogDB.mu); readers hold it (read-locked) only to
	// look up, never during I/O.
	mu       sync.RWMutex
	replicas map[raftio.NodeInfo]*replica
	live     map[uint64]liveEntries
}

// liveEntries is how many live entries a segment holds, and their bytes.
type liveEntries struct {
	n     int
	bytes int64
}

func newIndex() *index {
	return &index{replicas: make(map[raftio.NodeInfo]*replica), live: make(map[uint64]liveEntries)}
}

// get returns the replica, nil if the index has none.
func (x *index) get(ni raftio.NodeInfo) *replica { return x.replicas[ni] }

func (x *index) getOrAdd(ni raftio.NodeInfo) *replica {
	r := x.replicas[ni]
	if r == nil {
		r = &replica{}
		x.replicas[ni] = r
	}
	return r
}

func (x *index) dropped(l loc) {
	le := x.live[l.seg]
	if le.n--; le.n == 0 {
		delete(x.live, l.seg)
		return
	}
	le.bytes -= int64(l.n)
	x.live[l.seg] = le
}

// apply applies a record's payload, written at payloadOff in segment seq.
// live says the record was just written by this process (as opposed to
// replayed by Open), which only matters to the save path's memory of the
// last State. Callers hold mu.
func (x *index) apply(typ byte, payload []byte, seq uint64, payloadOff int64, live bool) error {
	switch typ {
	case recBatch:
		r := opReader{payload: payload}
		var o op
		for {
			ok, err := r.next(&o)
			if !ok || err != nil {
				return err
			}
			if err := x.applyOp(&o, seq, payloadOff, live); err != nil {
				return err
			}
		}
	case recCheckpoint:
		return x.applyCheckpoint(payload, seq, payloadOff)
	}
	return fmt.Errorf("seglog: unknown record type %d", typ)
}

func (x *index) applyOp(o *op, seq uint64, payloadOff int64, live bool) error {
	r := x.getOrAdd(o.ni)
	switch o.typ {
	case opBootstrap:
		r.bootstrap, r.hasBootstrap = slices.Clone(o.data), true
	case opState:
		if err := r.state.Unmarshal(o.data); err != nil {
			return fmt.Errorf("seglog: state of shard %d replica %d: %w", o.ni.ShardID, o.ni.ReplicaID, err)
		}
		r.hasState = true
		if live {
			r.saved, r.savedSinceOpen = r.state, true
		}
	case opSnapshot, opSnapshotSet:
		// Raft's step worker and snapshot worker may save snapshots of
		// one replica at once; the newest wins whatever the order.
		if o.typ == opSnapshotSet || !r.hasSnap || o.index > r.snapIndex {
			r.snapshot, r.snapIndex, r.hasSnap = slices.Clone(o.data), o.index, true
		}
	case opMaxIndex:
		r.maxIndex, r.hasMax = o.index, true
	case opEntry:
		l := loc{seg: seq, off: uint32(payloadOff) + uint32(o.off), n: uint32(len(o.data))}
		if old, ok := r.entries.set(o.index, l); ok {
			x.dropped(old)
		}
		le := x.live[seq]
		le.n++
		le.bytes += int64(l.n)
		x.live[seq] = le
	case opCompact:
		r.floor, r.floorPos = max(r.floor, o.index), position(seq, payloadOff)
		r.entries.dropTo(o.index, x.dropped)
	case opRemove:
		r.entries.dropTo(^uint64(0), x.dropped)
		*r = replica{resetPos: position(seq, payloadOff)}
	case opFloor:
		pos, err := o.posData()
		if err != nil {
			return err
		}
		r.floor, r.floorPos = o.index, pos
	case opReset:
		pos, err := o.posData()
		if err != nil {
			return err
		}
		r.resetPos = pos
	case opSegment, opStart:
		// Only Open reads these (checkpointSegments).
	default:
		return fmt.Errorf("seglog: unknown op %d", o.typ)
	}
	return nil
}

// applyCheckpoint replaces every replica's metadata with the checkpoint's,
// drops the replicas it does not list, and drops the entries that the
// checkpoint's removal points say are gone: Open may have replayed them
// from an older segment without the (retired) segment that removed them.
func (x *index) applyCheckpoint(payload []byte, seq uint64, payloadOff int64) error {
	seen := make(map[raftio.NodeInfo]bool)
	r := opReader{payload: payload}
	var o op
	for {
		ok, err := r.next(&o)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if o.typ == opSegment || o.typ == opStart {
			continue
		}
		if !seen[o.ni] {
			seen[o.ni] = true
			if r := x.replicas[o.ni]; r != nil {
				*r = replica{entries: r.entries}
			}
		}
		if err := x.applyOp(&o, seq, payloadOff, false); err != nil {
			return err
		}
	}
	for ni, r := range x.replicas {
		if !seen[ni] {
			r.entries.dropTo(^uint64(0), x.dropped)
			delete(x.replicas, ni)
			continue
		}
		r.entries.filter(func(i uint64, l loc) bool {
			p := l.pos()
			return p >= r.resetPos && (i > r.floor || p >= r.floorPos)
		}, x.dropped)
	}
	return nil
}

// appendCheckpoint appends the metadata ops of every replica that has any,
// in shard and replica order. Callers hold mu (read).
func (x *index) appendCheckpoint(buf []byte) ([]byte, error) {
	nis := make([]raftio.NodeInfo, 0, len(x.replicas))
	for ni := range x.replicas {
		nis = append(nis, ni)
	}
	slices.SortFunc(nis, compareNodeInfo)
	var err error
	for _, ni := range nis {
		r := x.replicas[ni]
		if !r.hasBootstrap && !r.hasState && !r.hasSnap && !r.hasMax && len(r.entries) == 0 &&
			r.floorPos == 0 && r.resetPos == 0 {
			continue
		}
		if r.hasBootstrap {
			var d []byte
			buf, d = appendOp(buf, opBootstrap, ni, 0, len(r.bootstrap))
			copy(d, r.bootstrap)
		}
		if r.hasState {
			if buf, err = appendMarshalOp(buf, opState, ni, 0, &r.state); err != nil {
				return nil, err
			}
		}
		if r.hasSnap {
			var d []byte
			buf, d = appendOp(buf, opSnapshotSet, ni, r.snapIndex, len(r.snapshot))
			copy(d, r.snapshot)
		}
		if r.hasMax {
			buf, _ = appendOp(buf, opMaxIndex, ni, r.maxIndex, 0)
		}
		// Always there, so that the checkpoint lists the replica.
		buf = appendPosOp(buf, opFloor, ni, r.floor, r.floorPos)
		if r.resetPos != 0 {
			buf = appendPosOp(buf, opReset, ni, 0, r.resetPos)
		}
	}
	return buf, nil
}

func compareNodeInfo(a, b raftio.NodeInfo) int {
	switch {
	case a.ShardID != b.ShardID:
		if a.ShardID < b.ShardID {
			return -1
		}
		return 1
	case a.ReplicaID < b.ReplicaID:
		return -1
	case a.ReplicaID > b.ReplicaID:
		return 1
	}
	return 0
}
