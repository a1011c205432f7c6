package statemachine

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// TestApplyClusterVersion: a raise sets the table's cluster version and
// never lowers it; a level report changes nothing; neither touches a lock
// or the token counter, and both reach the observer.
func TestApplyClusterVersion(t *testing.T) {
	tests := []struct {
		name   string
		levels []uint64 // raised to, in order; 0 stands for a report
		want   uint64
	}{
		{"never raised", nil, 1},
		{"reports only", []uint64{0, 0}, 1},
		{"raised", []uint64{2}, 2},
		{"raised twice", []uint64{2, 3}, 3},
		{"a late lower raise", []uint64{3, 2}, 3},
		{"a raise to 1", []uint64{1}, 1},
		{"above this build", []uint64{FeatureLevel + 1}, FeatureLevel + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := newRecorder()
			s, _ := openSM(t, newTestDB(t), obs, 2)
			update(t, s, fenceEntry(1, 7), entry(2, grantBy("a", 100, "o")))
			before, seq := locks(s), s.t.seq
			for i, l := range tc.levels {
				h := Header{Proposer: 3, Raise: true, Level: l}
				if l == 0 {
					h = Header{Proposer: 3, Report: true, Level: FeatureLevel}
				}
				if got := update(t, s, sm.Entry{Index: uint64(3 + i), Cmd: encode(h)}); got[0] != 0 {
					t.Fatalf("entry value %d, want 0 commands", got[0])
				}
				c := obs.calls()[len(obs.calls())-1]
				if c.h.Raise != h.Raise || c.h.Report != h.Report || c.h.Level != h.Level || c.h.Proposer != 3 || len(c.cmds) != 0 {
					t.Fatalf("observer got %+v with %d commands for %+v", c.h, len(c.cmds), h)
				}
			}
			if got := (Table{s.t}).ClusterVersion(); got != tc.want {
				t.Fatalf("cluster version %d, want %d", got, tc.want)
			}
			if !reflect.DeepEqual(locks(s), before) || s.t.seq != seq || s.t.fence != 7 {
				t.Fatalf("locks %v, seq %d, fence %d changed", locks(s), s.t.seq, s.t.fence)
			}
			// The fence still holds: a raise is not a batch of another
			// proposer that it keeps out, nor does it end the fence.
			update(t, s, entryBy(s.applied+1, 8, grant("b", 1)))
			if got := obs.calls()[len(obs.calls())-1].results[0].Code; got != Fenced {
				t.Fatalf("another proposer's grant after the raises: %d", got)
			}
		})
	}
}

// TestMetaClusterVersion: the meta carries the cluster version from 2 on
// (32 bytes) and keeps the 24 bytes a build of level 1 reads until then;
// a reopened table has its version; Open and StoredClusterVersion refuse a
// version above FeatureLevel with a reason that names it.
func TestMetaClusterVersion(t *testing.T) {
	db := newTestDB(t)
	s, _ := openSM(t, db, nil, 3)
	update(t, s, entry(1, grant("a", 1)))
	syncSM(t, s)
	if n := metaBytes(t, db, 3); n != metaLen {
		t.Fatalf("meta of a table never raised is %d bytes, want %d", n, metaLen)
	}
	if v, err := StoredClusterVersion(db); v != 1 || err != nil {
		t.Fatalf("StoredClusterVersion = %d, %v; want 1", v, err)
	}
	update(t, s, raiseEntry(2, 2))
	checkMirror(t, s) // the reopened table has the version
	if n := metaBytes(t, db, 3); n != metaLenVersioned {
		t.Fatalf("meta of a table raised to 2 is %d bytes, want %d", n, metaLenVersioned)
	}
	if v, err := StoredClusterVersion(db); v != 2 || err != nil {
		t.Fatalf("StoredClusterVersion = %d, %v; want 2", v, err)
	}

	// A raise above this build applies (every replica's table stays
	// alike), but the data dir it leaves is refused at the next start.
	update(t, s, raiseEntry(3, FeatureLevel+1))
	syncSM(t, s)
	v, err := StoredClusterVersion(db)
	if !errors.Is(err, ErrTooOld) || v != FeatureLevel+1 || !strings.Contains(err.Error(), fmt.Sprintf("shard 3 is at cluster version %d", FeatureLevel+1)) {
		t.Fatalf("StoredClusterVersion = %d, %v; want %d and ErrTooOld naming shard 3", v, err, FeatureLevel+1)
	}
	if _, err := Factory(db, nil)(3, 1).Open(nil); !errors.Is(err, ErrTooOld) {
		t.Fatalf("Open of a table above this build: %v", err)
	}

	// A versioned meta must be of a version above 1: one encoding per
	// table.
	for _, level := range []uint64{0, 1} {
		m := meta{applied: 4, seq: 5, level: 2}
		v := m.encode(nil)
		v[24] = byte(level)
		if _, ok := decodeMeta(v); ok {
			t.Errorf("a 32-byte meta of version %d decoded", level)
		}
	}
}

// TestSnapshotClusterVersion: a table raised to 2 or more streams version
// 4, with its fence (0 or not) and its version, whatever its owners; a
// table never raised streams as before (TestSnapshotVersion); recovering
// gives the version back, in memory and in the meta; a stream of a
// version above this build is refused and changes nothing.
func TestSnapshotClusterVersion(t *testing.T) {
	tests := []struct {
		name  string
		fence bool
		cmds  []Command
	}{
		{"empty table", false, nil},
		{"no owners", false, []Command{grant("a", 1), grant("b", 2)}},
		{"owners", false, []Command{grantBy("a", 1, "x"), grant("b", 2)}},
		{"fence and owners", true, []Command{grantBy("a", 1, "x"), grant("b", 2)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openSM(t, newTestDB(t), nil, 4)
			ents := []sm.Entry{raiseEntry(1, 2)}
			if tc.fence {
				ents = append(ents, fenceEntry(2, 7))
			}
			ents = append(ents, entry(uint64(len(ents)+1), tc.cmds...))
			update(t, s, ents...)
			var held []Lock
			s.t.each(func(l Lock) { held = append(held, l) })
			data := saveSnapshot(t, s)
			if want := encodeStream(snapVersionVersioned, 4, s.t.meta(s.applied), held); !bytes.Equal(data, want) {
				t.Fatalf("saved\n%x\nwant version 4\n%x", data, want)
			}
			dst, _ := openSM(t, newTestDB(t), nil, 4)
			if err := dst.RecoverFromSnapshot(bytesReader(data), nil); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(locks(dst), locks(s)) || dst.t.meta(dst.applied) != s.t.meta(s.applied) {
				t.Fatalf("recovered %v, %+v; want %v, %+v", locks(dst), dst.t.meta(dst.applied), locks(s), s.t.meta(s.applied))
			}
			checkMirror(t, dst) // the meta has the version
		})
	}

	src, _ := openSM(t, newTestDB(t), nil, 4)
	update(t, src, entry(1, grant("a", 1)))
	m, held := src.t.meta(src.applied), []Lock{{Key: []byte("a"), Token: 1<<ShardBits | 4, LeaseMs: 1}}
	for _, level := range []uint64{0, 1, FeatureLevel + 1} {
		m.level = level
		dst, _ := openSM(t, newTestDB(t), nil, 4)
		update(t, dst, entry(1, grant("keep", 1)))
		err := dst.RecoverFromSnapshot(bytesReader(encodeStream(snapVersionVersioned, 4, m, held)), nil)
		switch {
		case level > FeatureLevel && !errors.Is(err, ErrTooOld):
			t.Errorf("a version 4 stream of cluster version %d: %v, want ErrTooOld", level, err)
		case level <= levelNone && !errors.Is(err, ErrBadSnapshot):
			t.Errorf("a version 4 stream of cluster version %d: %v, want ErrBadSnapshot", level, err)
		}
		if _, ok := locks(dst)["keep"]; !ok || dst.t.level != levelNone {
			t.Errorf("a refused stream of cluster version %d changed the table: %v, level %d", level, locks(dst), dst.t.level)
		}
	}
}
