package stagetrace

import (
	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"

	sm "github.com/baton-dev/baton/statemachine"
)

// encoded is cmd as dragonboat keeps a proposal: an EncodedEntry, its
// header byte (rsm.GetEncoded) before the bytes proposed.
func encoded(header byte, cmd []byte) *pb.Entry {
	return &pb.Entry{Type: pb.EncodedEntry, Index: 7, Cmd: append([]byte{header}, cmd...)}
}

// BatchOf reads the header the state machine's encoding writes: a command
// batch of any version is one, with its proposer and seq; nothing else is.
func TestBatchOf(t *testing.T) {
	entry := func(b []byte) *pb.Entry { return &pb.Entry{Index: 7, Cmd: b} }
	var plain, owned, shared sm.Batch
	plain.Append(sm.Command{Op: sm.OpGrant, Key: []byte("k"), LeaseMs: 1000})
	owned.Append(sm.Command{Op: sm.OpGrant, Key: []byte("k"), LeaseMs: 1000, Owner: []byte("o")})
	shared.Append(sm.Command{Op: sm.OpGrant, Key: []byte("k"), LeaseMs: 1000, Permits: 3})
	for name, b := range map[string]*sm.Batch{"plain": &plain, "owned": &owned, "shared": &shared} {
		cmd := b.Seal(sm.Header{Proposer: 0xabcdef01, Seq: 4242})
		for _, e := range []*pb.Entry{entry(cmd), encoded(0, cmd)} {
			p, seq, ok := BatchOf(e)
			if !ok || p != 0xabcdef01 || seq != 4242 {
				t.Errorf("%s batch (%v): BatchOf = %x, %d, %v; want abcdef01, 4242, true", name, e.Type, p, seq, ok)
			}
		}
	}
	var empty sm.Batch
	notBatches := map[string]*pb.Entry{
		"fence":         entry(empty.Seal(sm.Header{Proposer: 3, Seq: 8, Fence: true})),
		"hand-off":      entry(empty.Seal(sm.Header{Proposer: 3, HandOff: true})),
		"report":        entry(empty.Seal(sm.Header{Proposer: 3, Report: true, Level: 2})),
		"directory":     entry(sm.SealDirectory(3, 1, []byte("x"))),
		"empty":         entry(nil),
		"short":         entry(make([]byte, headerLen-1)),
		"config":        {Type: pb.ConfigChangeEntry, Cmd: plain.Seal(sm.Header{Proposer: 3, Seq: 8})},
		"snappy":        encoded(1<<1, plain.Seal(sm.Header{Proposer: 3, Seq: 8})),
		"encoded fence": encoded(0, empty.Seal(sm.Header{Proposer: 3, Seq: 8, Fence: true})),
		"encoded short": encoded(0, nil),
	}
	for name, e := range notBatches {
		if _, _, ok := BatchOf(e); ok {
			t.Errorf("%s: BatchOf says it is a command batch", name)
		}
	}
}

func TestKindNames(t *testing.T) {
	for k := Read; k < numKinds; k++ {
		if got, ok := ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, ok)
		}
	}
	if _, ok := ParseKind("node"); ok {
		t.Error(`"node" parses as a kind`)
	}
}
