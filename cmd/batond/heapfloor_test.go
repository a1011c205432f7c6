package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

// residentKiB is this process's VmRSS, or -1 where /proc does not say.
func residentKiB(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return -1
}

// heapFloorChild marks the fresh process TestHeapFloor runs itself in.
const heapFloorChild = "BATON_TEST_HEAP_FLOOR_CHILD"

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The floor raises the collector's goal above itself, and costs no
// resident memory: what the technique depends on. It is checked in a fresh
// test process, whose heap, like batond's when run allocates the floor,
// has no freed memory that the allocation could reuse (and zero): in this
// one, the tests before may have left some.
func TestHeapFloor(t *testing.T) {
	if os.Getenv(heapFloorChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHeapFloor$", "-test.short", "-test.v")
		cmd.Env = append(os.Environ(), heapFloorChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in a fresh process: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "--- SKIP") {
			t.Skipf("in a fresh process:\n%s", out)
		}
		return
	}
	if holdHeapFloor(0) != nil {
		t.Fatal("a floor of 0 allocated")
	}
	const size = 256 << 20
	runtime.GC()
	before := residentKiB(t)
	floor := holdHeapFloor(size)
	runtime.GC()
	goal := heapGoal()
	after := residentKiB(t)
	runtime.KeepAlive(floor)
	if goal < size {
		t.Errorf("heap goal %d with a floor of %d: want at least the floor", goal, size)
	}
	if before < 0 {
		t.Skip("no /proc/self/status: resident memory not checked")
	}
	if grew := (after - before) << 10; grew > size/8 {
		t.Errorf("resident memory grew by %d bytes with a floor of %d: the floor was touched", grew, size)
	}
}
