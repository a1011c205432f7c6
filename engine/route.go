package engine

// ShardOf maps a key to its shard id (1..shards) with FNV-1a, a stable hash
// that every node computes the same way: the shard count is fixed when the
// cluster is created, so a key never moves to another shard. (Exported for
// tools that choose keys by shard, such as the chaos run.)
func ShardOf(key []byte, shards int) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, b := range key {
		h ^= uint64(b)
		h *= prime
	}
	return h%uint64(shards) + 1
}
