package main

// baton lock --permits against a real batond (tools/harness).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestLockPermitsRealNode: three baton lock --permits 2 on one key,
// started together, against a real batond; each command logs a start and
// an end line around a sleep. Two run at once, never three, and each has
// a token of its own.
func TestLockPermitsRealNode(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	file := filepath.Join(t.TempDir(), "log")
	script := `echo "start $BATON_TOKEN" >> "$0"; sleep 1; echo "end $BATON_TOKEN" >> "$0"`
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, errs := baton(t, n.ClientAddr, "lock", "cli/sem", "--permits", "2", "--wait", "20s", "--", "sh", "-c", script, file)
			if code != 0 {
				t.Errorf("baton lock --permits 2: exit %d: %s", code, errs)
			}
		}()
	}
	wg.Wait()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	running, most := map[string]bool{}, 0
	tokens := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		what, token, _ := strings.Cut(l, " ")
		switch what {
		case "start":
			running[token], tokens[token] = true, true
			most = max(most, len(running))
		case "end":
			delete(running, token)
		}
	}
	if len(tokens) != 3 || most != 2 {
		t.Fatalf("%d tokens, at most %d at once; want 3 and 2:\n%s", len(tokens), most, data)
	}
	c := newClient(t, n.ClientAddr)
	if st, err := c.Query(context.Background(), "cli/sem"); err != nil || st.Holders != 0 {
		t.Fatalf("after the commands: %+v, %v", st, err)
	}
}
