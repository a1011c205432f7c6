package bench

import (
	"bytes"
	"strconv"
)

// Key names. Every in-flight cycle of the uncontended, mixed and expiry
// workloads must use a key of its own (otherwise cycles would queue behind
// each other), so such a key names the connection and the slot that owns
// it: distinct (conn, slot) pairs can never produce the same key, and the
// owner can be read back from the echoed key without a lookup table. Each
// workload has its own prefix, so that a run never waits for a key another
// workload's run left held.
const (
	cyclePrefix     = "bench/"
	mixedPrefix     = "bench/m/"
	expiryPrefix    = "bench/x/"
	contendedPrefix = "bench/c/"
	holdPrefix      = "bench/hold/"
)

// appendCycleKey appends the key "<prefix><conn>/<slot>/<idx>" to dst.
func appendCycleKey(dst []byte, prefix string, conn, slot, idx int) []byte {
	dst = append(dst, prefix...)
	dst = strconv.AppendInt(dst, int64(conn), 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, int64(slot), 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(idx), 10)
}

// parseCycleKey is the inverse of appendCycleKey.
func parseCycleKey(prefix string, key []byte) (conn, slot, idx int, ok bool) {
	rest, found := bytes.CutPrefix(key, []byte(prefix))
	if !found {
		return 0, 0, 0, false
	}
	var fields [3]int
	for i := range fields {
		var n int
		if n, rest, ok = leadingInt(rest); !ok {
			return 0, 0, 0, false
		}
		fields[i] = n
		if i < 2 {
			if len(rest) == 0 || rest[0] != '/' {
				return 0, 0, 0, false
			}
			rest = rest[1:]
		}
	}
	if len(rest) != 0 {
		return 0, 0, 0, false
	}
	return fields[0], fields[1], fields[2], true
}

// keyspace maps one connection's cycle slots to keys and back.
type keyspace interface {
	// appendKey appends the key of the n-th cycle of slot to dst, and
	// returns the key's number for the token checks (within the slot for
	// keys of its own, within the run for shared keys).
	appendKey(dst []byte, slot, n int) ([]byte, int)
	// slotOf reads back which slot an echoed key belongs to.
	slotOf(key []byte) (int, bool)
	// count is the number of distinct keys the run's slots use.
	count() int
}

// ownKeys gives every slot of connection conn perSlot keys of its own,
// used in turn.
type ownKeys struct {
	prefix        string
	conn, perSlot int
	slots, conns  int
}

func (k ownKeys) count() int { return k.perSlot * k.slots * k.conns }

func (k ownKeys) appendKey(dst []byte, slot, n int) ([]byte, int) {
	idx := n % k.perSlot
	return appendCycleKey(dst, k.prefix, k.conn, slot, idx), idx
}

func (k ownKeys) slotOf(key []byte) (int, bool) {
	conn, slot, idx, ok := parseCycleKey(k.prefix, key)
	return slot, ok && conn == k.conn && slot < k.slots && idx < k.perSlot
}

// sharedKeys spreads the slots of all connections over keys shared keys:
// slot s of connection c is client c*depth+s and always uses key number
// (c*depth+s) mod keys, "<prefix><number>". Since depth <= keys, the slots
// of one connection have distinct keys, and an answer still names its slot.
type sharedKeys struct {
	prefix            string
	conn, depth, keys int
}

func (k sharedKeys) count() int { return k.keys }

func (k sharedKeys) appendKey(dst []byte, slot, _ int) ([]byte, int) {
	idx := (k.conn*k.depth + slot) % k.keys
	dst = append(dst, k.prefix...)
	return strconv.AppendInt(dst, int64(idx), 10), idx
}

func (k sharedKeys) slotOf(key []byte) (int, bool) {
	rest, found := bytes.CutPrefix(key, []byte(k.prefix))
	if !found {
		return 0, false
	}
	idx, rest, ok := leadingInt(rest)
	if !ok || len(rest) != 0 || idx >= k.keys {
		return 0, false
	}
	slot := ((idx-k.conn*k.depth)%k.keys + k.keys) % k.keys
	return slot, slot < k.depth
}

// appendHoldKey appends the key "bench/hold/<i>" to dst. Its prefix is not a
// number, so hold keys never collide with cycle keys.
func appendHoldKey(dst []byte, i int) []byte {
	dst = append(dst, holdPrefix...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// parseHoldKey is the inverse of appendHoldKey.
func parseHoldKey(key []byte) (int, bool) {
	rest, found := bytes.CutPrefix(key, []byte(holdPrefix))
	if !found {
		return 0, false
	}
	n, rest, ok := leadingInt(rest)
	if !ok || len(rest) != 0 {
		return 0, false
	}
	return n, true
}

// leadingInt reads the decimal at the start of b, in canonical form (no sign,
// no leading zero), so that exactly one spelling maps to each number.
func leadingInt(b []byte) (n int, rest []byte, ok bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i >= 18 { // stays far from overflow; our numbers are small
			return 0, b, false
		}
		n = n*10 + int(b[i]-'0')
		i++
	}
	if i == 0 || (i > 1 && b[0] == '0') {
		return 0, b, false
	}
	return n, b[i:], true
}
