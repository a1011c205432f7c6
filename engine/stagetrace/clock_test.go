//go:build stagetrace

package stagetrace

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func monotonic(t *testing.T) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

// Now is CLOCK_MONOTONIC: between two clock_gettime readings, give or
// take its calibration error.
func TestNowIsClockMonotonic(t *testing.T) {
	if ClockError() > 50_000 {
		t.Fatalf("calibration error %d ns", ClockError())
	}
	for range 1000 {
		a := monotonic(t)
		n := Now()
		b := monotonic(t)
		if n < a-ClockError() || n > b+ClockError() {
			t.Fatalf("Now %d not within [%d, %d] ± %d", n, a, b, ClockError())
		}
	}
}

// Another process's Now reads the same clock: a child's reading lies
// between two of the parent's taken before and after it ran.
func TestNowAcrossProcesses(t *testing.T) {
	if os.Getenv("STAGETRACE_CHILD") != "" {
		os.Stdout.WriteString("NOW " + strconv.FormatInt(Now(), 10) + " " + strconv.FormatInt(ClockError(), 10) + "\n")
		return
	}
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNowAcrossProcesses$")
		cmd.Env = append(os.Environ(), "STAGETRACE_CHILD=1")
		before := Now()
		out, err := cmd.Output()
		after := Now()
		if err != nil {
			t.Fatal(err)
		}
		var child, childErr int64
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "NOW" {
				child, _ = strconv.ParseInt(f[1], 10, 64)
				childErr, _ = strconv.ParseInt(f[2], 10, 64)
			}
		}
		slack := ClockError() + childErr
		if child == 0 || child < before-slack || child > after+slack {
			t.Fatalf("child's Now %d not within the parent's [%d, %d] ± %d", child, before, after, slack)
		}
	}
}
