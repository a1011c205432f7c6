package main

// The garbage collector's heap floor (--heap-floor).
//
// batond allocates little that lives: at a low request rate its live heap
// is a few MB, and with GOGC at 50 (defaultGCPercent) the collector starts
// a cycle after every few MB of allocation, which Raft's per-commit garbage
// (dragonboat allocates a 512-entry slice each time it applies a batch)
// reaches 16 times a second at 1,000 lock cycles a second. Every cycle
// stops the world twice and lends a quarter of the cores to marking; on a
// shared machine that doubled the p99 of a fixed-rate run (BENCHMARKS.md
// "Garbage collection at low rates").
//
// Go has no minimum heap size; a GOMEMLIMIT would cap a lock table that
// grows, and a larger GOGC would multiply it. So batond holds a ballast: a
// pointer-free allocation the program never touches, which the collector
// counts as live (its goal becomes 1.5 times live plus the floor) but
// which costs no resident memory, since the kernel backs untouched pages
// with nothing (Linux; the technique gopls uses for the same reason). What
// it does cost is the garbage allowed to build up between cycles: up to
// half the floor in RSS, and nothing in proportion to a large table.

// holdHeapFloor allocates the ballast, size bytes (none for 0); the caller
// keeps the result alive (runtime.KeepAlive) for as long as the floor is to
// hold. It must run early, while the heap has no freed memory that the
// allocation would reuse and zero (touch).
func holdHeapFloor(size int) []byte {
	if size <= 0 {
		return nil
	}
	return make([]byte, size)
}
