package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/engine"
)

func TestGenerationKeysStayOnTheirShard(t *testing.T) {
	seen := make(map[string]bool)
	for _, base := range append(append([]string{}, DefaultKeys...), ProbeKeys...) {
		for g := range 20 {
			k := generationKey(base, g)
			if engine.ShardOf([]byte(k), runShards) != engine.ShardOf([]byte(base), runShards) {
				t.Fatalf("%s in generation %d is %s, on another shard", base, g, k)
			}
			if seen[k] {
				t.Fatalf("%s named twice", k)
			}
			seen[k] = true
			if g > 0 && !strings.HasPrefix(k, base+"~g") {
				t.Fatalf("%s in generation %d is %s", base, g, k)
			}
		}
	}
}

func TestKeyRingMovesOnAndRemembers(t *testing.T) {
	var now time.Duration
	r := newKeyRing(time.Minute, func() time.Duration { return now })
	first := r.now("chaos/a")
	now = 61 * time.Second
	second := r.now("chaos/a")
	if first != "chaos/a" || second == first || r.now("chaos/a") != second {
		t.Fatalf("names %q then %q", first, second)
	}
	if got := r.used(); len(got) != 2 {
		t.Fatalf("used %q, want both names", got)
	}
}
