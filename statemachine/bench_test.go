package statemachine

import (
	"fmt"
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
