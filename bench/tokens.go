package bench

// tokenOrder checks the fencing-token promise for a set of keys numbered
// 0, 1, 2, ...: every grant of a key gets a token greater than every token
// the key had before. Equal counts as a violation, since no token is ever
// issued twice.
//
// It keeps the last token per key in a slice that grows to the highest key
// number seen, so memory follows the keys actually used (8 bytes each), not
// the configured key space.
type tokenOrder struct {
	last []uint64 // 0: no grant seen yet (tokens are never 0)
}

// observe records a grant of token tok for key idx and reports whether it
// kept the order.
func (t *tokenOrder) observe(idx int, tok uint64) bool {
	if idx >= len(t.last) {
		t.last = append(t.last, make([]uint64, idx+1-len(t.last))...)
	}
	prev := t.last[idx]
	if prev != 0 && tok <= prev {
		// Keep the highest token seen: later grants must beat it too.
		return false
	}
	t.last[idx] = tok
	return true
}
