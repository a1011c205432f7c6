package codec

import "testing"

func TestOpIndex(t *testing.T) {
	seen := map[int]bool{}
	for _, op := range []byte{OpAcquire, OpRelease, OpExtend, OpQuery, OpHello} {
		i := OpIndex(op)
		if i < 0 || i >= NumOps || seen[i] {
			t.Fatalf("OpIndex(%c) = %d: want a place of its own in 0..%d", op, i, NumOps-1)
		}
		seen[i] = true
	}
	for _, op := range []byte{'?', 'a', 0, 'Z'} {
		if i := OpIndex(op); i != -1 {
			t.Fatalf("OpIndex(%q) = %d, want -1", op, i)
		}
	}
}
