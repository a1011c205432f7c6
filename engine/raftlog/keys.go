package raftlog

import (
	"encoding/binary"
	"math"
)

// Key prefixes. Each kind of record has its own prefix byte so that a kind is
// one contiguous key range (ListNodeInfo scans the bootstrap range), and every
// key continues with the shard id and the replica id, big-endian, so that one
// replica's records of one kind are contiguous too. Entries and snapshots add
// their index, big-endian, so that pebble's byte order is index order: a
// replica's log is one range that a single DeleteRange or Compact covers.
//
// The values are not part of the order, so the prefixes only need to be
// distinct; they are never reused for another meaning, because a store
// written by one version is read by the next.
const (
	prefixBootstrap byte = 0x01 // pb.Bootstrap
	prefixState     byte = 0x02 // pb.State (term, vote, commit)
	prefixMaxIndex  byte = 0x03 // 8 bytes, big-endian: the highest live entry index
	prefixSnapshot  byte = 0x04 // pb.Snapshot, keyed by its index
	prefixEntry     byte = 0x05 // pb.Entry, keyed by its index
)

const (
	// replicaKeyLen is the length of a key that names a replica: prefix,
	// shard id, replica id.
	replicaKeyLen = 1 + 8 + 8
	// indexKeyLen is the length of a key that names one indexed record of a
	// replica: a replica key followed by the index.
	indexKeyLen = replicaKeyLen + 8
)

// putReplicaKey writes the key of a per-replica record into dst (which must
// hold replicaKeyLen bytes) and returns the written part, so that callers on
// the hot path can reuse a buffer.
func putReplicaKey(dst []byte, prefix byte, shardID, replicaID uint64) []byte {
	dst = dst[:replicaKeyLen]
	dst[0] = prefix
	binary.BigEndian.PutUint64(dst[1:], shardID)
	binary.BigEndian.PutUint64(dst[9:], replicaID)
	return dst
}

// putIndexKey writes the key of an indexed record (an entry or a snapshot)
// into dst, which must hold indexKeyLen bytes.
func putIndexKey(dst []byte, prefix byte, shardID, replicaID, index uint64) []byte {
	dst = dst[:indexKeyLen]
	putReplicaKey(dst, prefix, shardID, replicaID)
	binary.BigEndian.PutUint64(dst[replicaKeyLen:], index)
	return dst
}

// replicaKey returns a new per-replica key; for the paths that are not worth
// a reused buffer.
func replicaKey(prefix byte, shardID, replicaID uint64) []byte {
	return putReplicaKey(make([]byte, replicaKeyLen), prefix, shardID, replicaID)
}

// indexKey returns a new indexed key.
func indexKey(prefix byte, shardID, replicaID, index uint64) []byte {
	return putIndexKey(make([]byte, indexKeyLen), prefix, shardID, replicaID, index)
}

// indexRangeEnd returns the exclusive upper bound of the replica's indexed
// records of the given kind whose index is at most last. For last ==
// math.MaxUint64 there is no index last+1, so the bound is the end of the
// replica's whole range instead.
func indexRangeEnd(prefix byte, shardID, replicaID, last uint64) []byte {
	if last == math.MaxUint64 {
		return replicaRangeEnd(prefix, shardID, replicaID)
	}
	return indexKey(prefix, shardID, replicaID, last+1)
}

// replicaRangeEnd returns the smallest key greater than every key that starts
// with the replica key: the replica key read as a big-endian number, plus
// one. The prefix byte is never 0xff, so the carry always stops inside the
// key.
func replicaRangeEnd(prefix byte, shardID, replicaID uint64) []byte {
	k := replicaKey(prefix, shardID, replicaID)
	for i := len(k) - 1; i >= 0; i-- {
		k[i]++
		if k[i] != 0 {
			break
		}
	}
	return k
}

// parseReplicaKey returns the shard and replica ids of a per-replica key.
func parseReplicaKey(k []byte) (shardID, replicaID uint64, ok bool) {
	if len(k) != replicaKeyLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint64(k[9:]), true
}

// keyIndex returns the index of an indexed key, or false if k is not one.
func keyIndex(k []byte) (uint64, bool) {
	if len(k) != indexKeyLen {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[replicaKeyLen:]), true
}
