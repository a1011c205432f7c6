package statemachine

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// BenchmarkUpdate measures the apply path: per iteration one entry of 256
// Grants and one of their 256 Releases, each its own Update, as dragonboat
// would hand them over. The DB is on the test's temp dir; commits do not
// fsync, as in production.
func BenchmarkUpdate(b *testing.B) {
	s, _ := openSM(b, newTestDB(b), nil, 1)
	var grants, releases Batch
	for i := range 256 {
		key := fmt.Appendf(nil, "bench/lock/%08d", i)
		grants.Append(Command{Op: OpGrant, Key: key, LeaseMs: 10000})
		releases.Append(Command{Op: OpRelease, Key: key})
	}
	g := []sm.Entry{{Cmd: grants.Seal(Header{Proposer: 1, Seq: 1})}}
	r := []sm.Entry{{Cmd: releases.Seal(Header{Proposer: 1, Seq: 2})}}
	var index uint64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		index++
		g[0].Index = index
		if _, err := s.Update(g); err != nil {
			b.Fatal(err)
		}
		index++
		r[0].Index = index
		if _, err := s.Update(r); err != nil {
			b.Fatal(err)
		}
		if g[0].Result.Value != 256 || r[0].Result.Value != 256 {
			b.Fatal("commands not applied")
		}
	}
	b.ReportMetric(float64(b.N)*512/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkHeldLockBytes reports the heap one held lock costs the table
// (its map entry, key string, row and, if it has one, its owner), over
// 100,000 locks with 20-byte keys. "no owner" is what every lock cost
// before owners existed.
func BenchmarkHeldLockBytes(b *testing.B) {
	const n = 100000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "bench/lock/%010d", i)
	}
	for _, tc := range []struct {
		name  string
		owner string
	}{
		{"no owner", ""},
		{"owner 32 bytes", strings.Repeat("o", 32)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var before, after runtime.MemStats
			var perLock float64
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				tb := newTable(1, 0, 0)
				for _, k := range keys {
					c := Command{Op: OpGrant, Key: k, LeaseMs: 1000, Owner: []byte(tc.owner)}
					tb.apply(&c)
				}
				// What a checkpoint leaves: the table, not the changed set.
				tb.checkpointed()
				runtime.GC()
				runtime.ReadMemStats(&after)
				if tb.len() != n {
					b.Fatal("locks not granted")
				}
				perLock = float64(after.HeapAlloc-before.HeapAlloc) / n
			}
			b.ReportMetric(perLock, "B/lock")
		})
	}
}

// BenchmarkApplyExclusive measures the table's exclusive hot path alone,
// without pebble, dragonboat or decoding: per iteration 256 Grants of free
// keys and their 256 Releases, each entry ended, as Update applies them.
func BenchmarkApplyExclusive(b *testing.B) {
	tb := newTable(1, 0, 0)
	grants := make([]Command, 256)
	releases := make([]Command, 256)
	for i := range grants {
		key := fmt.Appendf(nil, "bench/lock/%08d", i)
		grants[i] = Command{Op: OpGrant, Key: key, LeaseMs: 10000}
		releases[i] = Command{Op: OpRelease, Key: key}
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range grants {
			if tb.apply(&grants[i]).Code != Granted {
				b.Fatal("not granted")
			}
		}
		tb.endEntry()
		for i := range releases {
			tb.apply(&releases[i])
		}
		tb.endEntry()
	}
	b.ReportMetric(float64(b.N)*512/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkSharedGrantBytes reports the heap one shared grant costs the
// table (its row and its entry in its key's holder index; the key's bytes,
// index entry, header and sharedKey shared by its grants), over 100,000
// grants: 1,000 keys of 20 bytes with 100 holders each, and 100 keys with
// 1,000.
func BenchmarkSharedGrantBytes(b *testing.B) {
	for _, tc := range []struct {
		name    string
		keys    int
		holders int
	}{
		{"100 holders a key", 1000, 100},
		{"1000 holders a key", 100, 1000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			keys := make([][]byte, tc.keys)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "bench/sem/%010d", i)
			}
			var before, after runtime.MemStats
			var perGrant float64
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				tb := newTable(1, 0, 0)
				tb.level = LevelShared
				for _, k := range keys {
					for range tc.holders {
						c := Command{Op: OpGrant, Key: k, LeaseMs: 1000, Permits: uint32(tc.holders)}
						tb.apply(&c)
					}
				}
				tb.checkpointed()
				runtime.GC()
				runtime.ReadMemStats(&after)
				if tb.len() != tc.keys*tc.holders {
					b.Fatal("grants not granted")
				}
				perGrant = float64(after.HeapAlloc-before.HeapAlloc) / float64(tc.keys*tc.holders)
			}
			b.ReportMetric(perGrant, "B/grant")
		})
	}
}
