package raftlog

import (
	"bytes"
	"math"
	"sort"
	"testing"
)

// A replica's entries sort by index and form one range that no key of
// another replica or kind falls into.
func TestKeyOrder(t *testing.T) {
	ids := []uint64{0, 1, 2, 255, 256, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	type key struct {
		prefix                    byte
		shardID, replicaID, index uint64
		k                         []byte
	}
	var keys []key
	for _, p := range []byte{prefixBootstrap, prefixState, prefixMaxIndex, prefixSnapshot, prefixEntry} {
		for _, s := range ids {
			for _, r := range ids[:4] {
				if p == prefixSnapshot || p == prefixEntry {
					for _, i := range ids {
						keys = append(keys, key{p, s, r, i, indexKey(p, s, r, i)})
					}
				} else {
					keys = append(keys, key{p, s, r, 0, replicaKey(p, s, r)})
				}
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i].k, keys[j].k) < 0 })
	for i := 1; i < len(keys); i++ {
		a, b := keys[i-1], keys[i]
		less := a.prefix < b.prefix ||
			a.prefix == b.prefix && (a.shardID < b.shardID ||
				a.shardID == b.shardID && (a.replicaID < b.replicaID ||
					a.replicaID == b.replicaID && a.index < b.index))
		if !less {
			t.Fatalf("key order: %+v before %+v", a, b)
		}
	}
	for _, k := range keys {
		if k.prefix != prefixEntry && k.prefix != prefixSnapshot {
			if s, r, ok := parseReplicaKey(k.k); !ok || s != k.shardID || r != k.replicaID {
				t.Fatalf("parseReplicaKey(%x) = %d, %d, %v", k.k, s, r, ok)
			}
			continue
		}
		if i, ok := keyIndex(k.k); !ok || i != k.index {
			t.Fatalf("keyIndex(%x) = %d, %v", k.k, i, ok)
		}
		// The replica's range [index 0, replicaRangeEnd) holds exactly its
		// own keys of that kind, and indexRangeEnd(last) ends just after
		// index last.
		lo, hi := indexKey(k.prefix, k.shardID, k.replicaID, 0), replicaRangeEnd(k.prefix, k.shardID, k.replicaID)
		for _, o := range keys {
			in := bytes.Compare(o.k, lo) >= 0 && bytes.Compare(o.k, hi) < 0
			own := o.prefix == k.prefix && o.shardID == k.shardID && o.replicaID == k.replicaID
			if in != own {
				t.Fatalf("key %+v in the range of %+v: %v", o, k, in)
			}
			if own {
				end := indexRangeEnd(k.prefix, k.shardID, k.replicaID, k.index)
				if below := bytes.Compare(o.k, end) < 0; below != (o.index <= k.index) {
					t.Fatalf("indexRangeEnd(%d) and index %d: below = %v", k.index, o.index, below)
				}
			}
		}
	}
}
