package engine

import (
	"strconv"
	"testing"
)

// The routing of keys is part of every data dir: a key's lock lives in the
// shard the hash picked when it was written. These values pin the hash, so
// that changing it breaks this test instead of silently moving keys.
func TestShardOfIsStable(t *testing.T) {
	cases := []struct {
		key    string
		shards int
		want   uint64
	}{
		{"orders/42", 4, 4},
		{"orders/42", 16, 16},
		{"a", 4, 1},
		{"a", 16, 13},
		{"baton", 4, 2},
		{"x/y/z", 16, 11},
		{"a", 1, 1},
	}
	for _, c := range cases {
		if got := ShardOf([]byte(c.key), c.shards); got != c.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.key, c.shards, got, c.want)
		}
	}
}

func TestShardOfSpreadsKeys(t *testing.T) {
	const shards = 8
	var count [shards + 1]int
	for i := 0; i < 8000; i++ {
		s := ShardOf([]byte("key-"+strconv.Itoa(i)), shards)
		if s < 1 || s > shards {
			t.Fatalf("shard %d out of 1..%d", s, shards)
		}
		count[s]++
	}
	for s := 1; s <= shards; s++ {
		if count[s] < 800 || count[s] > 1200 {
			t.Errorf("shard %d got %d of 8000 keys; the hash spreads badly", s, count[s])
		}
	}
}
