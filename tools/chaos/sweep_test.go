package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestCheckSweepSynthetic: the sweep passes the simulated correct servers'
// histories, with unknown outcomes, phantoms, owners and leaderless spells,
// and finds a dead end in those of the servers with a planted bug
// (simulatedServers); quickly, as it is meant to be cheap.
func TestCheckSweepSynthetic(t *testing.T) {
	for _, tt := range simulatedServers {
		t.Run(tt.name, func(t *testing.T) {
			_, h := tt.history()
			start := time.Now()
			found := 0
			for _, kc := range porcupineHistories(h) {
				r := sweep(kc.ops, time.Minute)
				switch {
				case r.gaveUp != "":
					t.Errorf("key %q: %s", kc.key, r.describe(kc.ops))
				case !r.ok && tt.correct:
					t.Errorf("key %q of a correct server: %s", kc.key, r.describe(kc.ops))
				case !r.ok:
					found++
					t.Logf("key %q: %s", kc.key, r.describe(kc.ops))
				}
			}
			if !tt.correct && found == 0 {
				t.Error("the bug was not found on any key")
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("the sweeps took %v", took)
			}
		})
	}
}

// TestCheckInconclusiveSweeps: when porcupine runs out of time, the
// inconclusive line carries the sweep's finding: the op past which the
// history cannot be linearized, or that it found no such op.
func TestCheckInconclusiveSweeps(t *testing.T) {
	bad := []Op{
		hGrant(1, "k", 1000, 0, 1, 1025),
		hFree(2, "k", 5, 6),
		hGrant(2, "k", 1000, 10, 11, 2049),
	}
	rep := Check(bad, nil, CheckConfig{Timeout: time.Nanosecond})
	v := strings.Join(rep.Violations, "\n")
	for _, want := range []string{"inconclusive", "found no linearization past op 1 of 3", "c2 Q k @5.000ms -> FREE", "held by 1025"} {
		if !strings.Contains(v, want) {
			t.Errorf("violations %q do not say %q", v, want)
		}
	}
	good := []Op{hGrant(1, "k", 1000, 0, 1, 1025), hRelease(1, "k", 1025, 2, 3, 0)}
	good[1].Status = bad[0].Status // OK
	rep = Check(good, nil, CheckConfig{Timeout: time.Nanosecond})
	v = strings.Join(rep.Violations, "\n")
	if !strings.Contains(v, "inconclusive") || !strings.Contains(v, "found a linearization of every op") {
		t.Errorf("violations %q: want inconclusive, with the sweep passing", v)
	}
}
