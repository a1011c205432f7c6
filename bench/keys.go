package bench

import (
	"bytes"
	"strconv"
)

// Key names. Every in-flight cycle must use a key of its own (otherwise
// cycles would queue behind each other and the workload would not be
// uncontended), so a key names the connection and the slot that owns it:
// distinct (conn, slot) pairs can never produce the same key, and the owner
// can be read back from the echoed key without a lookup table.
const (
	cyclePrefix = "bench/"
	holdPrefix  = "bench/hold/"
)

// appendCycleKey appends the key "bench/<conn>/<slot>/<idx>" to dst.
func appendCycleKey(dst []byte, conn, slot, idx int) []byte {
	dst = append(dst, cyclePrefix...)
	dst = strconv.AppendInt(dst, int64(conn), 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, int64(slot), 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(idx), 10)
}

// parseCycleKey is the inverse of appendCycleKey.
func parseCycleKey(key []byte) (conn, slot, idx int, ok bool) {
	rest, found := bytes.CutPrefix(key, []byte(cyclePrefix))
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
