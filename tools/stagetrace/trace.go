package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/engine/stagetrace"
)

// event is one line of a trace file (engine/stagetrace's format).
type event struct {
	kind                        stagetrace.Kind
	shard, proposer, seq, index uint64
	peer                        uint64
	t                           int64
}

// nodeTrace is one process's trace file: the replica it is and its events.
type nodeTrace struct {
	node   uint64
	events []event
}

// parseTrace reads one trace file.
func parseTrace(r io.Reader) (nodeTrace, error) {
	var nt nodeTrace
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] == "node" && len(f) == 2 {
			id, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return nt, fmt.Errorf("line %d: %v", line, err)
			}
			nt.node = id
			continue
		}
		k, ok := stagetrace.ParseKind(f[0])
		if !ok || len(f) != 7 {
			return nt, fmt.Errorf("line %d: not an event: %q", line, sc.Text())
		}
		var v [5]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[1+i], 10, 64)
			if err != nil {
				return nt, fmt.Errorf("line %d: %v", line, err)
			}
			v[i] = n
		}
		t, err := strconv.ParseInt(f[6], 10, 64)
		if err != nil {
			return nt, fmt.Errorf("line %d: %v", line, err)
		}
		nt.events = append(nt.events, event{kind: k, shard: v[0], proposer: v[1], seq: v[2], index: v[3], peer: v[4], t: t})
	}
	return nt, sc.Err()
}

// round is what one run left in its directory: every node's trace, and
// the window of the measured load (entries proposed outside it are not
// counted; 0, 0 when the directory has no window file).
type round struct {
	dir      string
	nodes    []nodeTrace
	from, to int64
}

// readRound reads DIR/stages-*.txt and DIR/window ("FROM TO", the trace
// clock's nanoseconds) if there is one.
func readRound(dir string) (round, error) {
	r := round{dir: dir}
	files, err := filepath.Glob(filepath.Join(dir, "stages-*.txt"))
	if err != nil {
		return r, err
	}
	if len(files) == 0 {
		return r, fmt.Errorf("%s: no stages-*.txt", dir)
	}
	sort.Strings(files)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return r, err
		}
		nt, err := parseTrace(f)
		_ = f.Close()
		if err != nil {
			return r, fmt.Errorf("%s: %v", name, err)
		}
		if nt.node == 0 {
			continue // a process that never started a node
		}
		r.nodes = append(r.nodes, nt)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "window")); err == nil {
		if _, err := fmt.Sscan(string(b), &r.from, &r.to); err != nil {
			return r, fmt.Errorf("%s/window: %v", dir, err)
		}
	} else if !os.IsNotExist(err) {
		return r, err
	}
	return r, nil
}
