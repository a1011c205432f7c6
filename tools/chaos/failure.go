package chaos

import (
	"bufio"
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/codec"
)

// What a failed run leaves behind, besides summary.txt: for every key a
// violation names, history-<key>.txt with everything that touched the key
// on the wire and in the workload, and faults.txt with the schedule. A
// violation line says what went wrong; these files are what it takes to
// find out why, long after the cluster is gone.

// failureData is what the files of a failed run are made of.
type failureData struct {
	history       []Op // the recorder's, in Call order
	events        []CallEvent
	eventsDropped int
	writes        []WriteEvent
	writesDropped int
	schedule      []Fault
	start         time.Time      // wall clock of the recorder's zero
	connNode      map[int]int    // connection number -> the node it went to (0: unknown)
	nodeLogs      map[int]string // node id -> its log file, copied into the run's dir
}

// writeFailureFiles writes the files of a failed run r into r.OutDir and
// returns their paths: faults.txt, and a history file for every key that a
// violation names. A file that cannot be written is skipped and its error
// returned, after the others were tried.
func writeFailureFiles(r *Result, d *failureData) ([]string, error) {
	var files []string
	var errs []string
	try := func(path string, write func(w *bufio.Writer)) {
		if err := writeFile(path, write); err != nil {
			errs = append(errs, err.Error())
			return
		}
		files = append(files, path)
	}
	used := make(map[string]bool) // file names taken: two keys may look alike once made file-safe
	for _, key := range namedKeys(r.Violations, d.keys(r.Config)) {
		name := "history-" + fileSafe(key)
		for i := 2; used[name]; i++ {
			name = fmt.Sprintf("history-%s-%d", fileSafe(key), i)
		}
		used[name] = true
		try(filepath.Join(r.OutDir, name+".txt"), func(w *bufio.Writer) { writeKeyHistory(w, key, r, d) })
	}
	try(filepath.Join(r.OutDir, "faults.txt"), func(w *bufio.Writer) { writeFaults(w, r, d.schedule) })
	for _, id := range slices.Sorted(maps.Keys(d.nodeLogs)) {
		raw, err := os.ReadFile(d.nodeLogs[id])
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		try(filepath.Join(r.OutDir, fmt.Sprintf("node-%d.log", id)), func(w *bufio.Writer) { w.Write(raw) })
	}
	if len(errs) > 0 {
		return files, fmt.Errorf("writing a failure's files: %s", strings.Join(errs, "; "))
	}
	return files, nil
}

// writeFile creates path and writes it through a buffer.
func writeFile(path string, write func(w *bufio.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	write(w)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// keys are every key the run touched: the workload's and the prober's, and
// any other the history shows (a request the workload should not have
// made is a clue too).
func (d *failureData) keys(c Config) []string {
	set := make(map[string]bool)
	for _, k := range c.Keys {
		set[k] = true
	}
	for _, k := range ProbeKeys {
		set[k] = true
	}
	for i := range d.history {
		set[d.history[i].Key] = true
	}
	return sortedKeys(set)
}

// namedKeys returns the keys among keys that some violation's text names,
// sorted.
func namedKeys(vs []Violation, keys []string) []string {
	var named []string
	for _, k := range keys {
		if slices.ContainsFunc(vs, func(v Violation) bool { return mentions(v.Text, k) }) {
			named = append(named, k)
		}
	}
	return named
}

// mentions reports whether text names key as a whole: the violations
// write a key bare (fence), quoted (linearizability, tokens) or inside a
// request line (hang, protocol), so it must stand between delimiters, lest
// key "a" be found in "chaos/a".
func mentions(text, key string) bool {
	if key == "" {
		return false
	}
	const delims = " \t\n\"'(),:;"
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], key)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(key)
		before := j == 0 || strings.IndexByte(delims, text[j-1]) >= 0
		after := end == len(text) || strings.IndexByte(delims, text[end]) >= 0
		if before && after {
			return true
		}
		i = j + 1
	}
	return false
}

// writeKeyHistory writes key's history file: the violations that name it,
// every wire op of the key, and the workload's events and the resource's
// writes of the key on one timeline.
func writeKeyHistory(w *bufio.Writer, key string, r *Result, d *failureData) {
	fmt.Fprintf(w, "# key %s of the failed chaos run with seed %d (reproduce with: %s)\n", key, r.Config.Seed, r.Config.reproduce())
	w.WriteString("# Times are on the recorder's clock, in ms: a violation's 9m42.540419199s is 582540.419ms here.\n")
	if !d.start.IsZero() {
		fmt.Fprintf(w, "# The recorder's 0 ms is %s on the wall clock of the nodes' logs (node-N.log).\n", d.start.UTC().Format("2006-01-02T15:04:05.000000Z"))
	}
	w.WriteString("#\n# Violations naming this key:\n")
	for _, v := range r.Violations {
		if mentions(v.Text, key) {
			fmt.Fprintf(w, "#   %s: %s\n", v.Checker, strings.ReplaceAll(v.Text, "\n", "\n#   "))
		}
	}

	var ops []*Op
	for i := range d.history {
		if d.history[i].Key == key {
			ops = append(ops, &d.history[i])
		}
	}
	fmt.Fprintf(w, "\n## Wire ops (%d) in Call order: connection (and the node it went to), the request as sent (A: lease, wait, owner), [Call, Return], the answer.\n", len(ops))
	w.WriteString("## \"unanswered\": no answer came before the connection failed or the run ended (Return is then);\n")
	w.WriteString("## \"(unknown)\": the op may or may not have taken effect, at any time after its Call.\n")
	for _, o := range ops {
		line := o.String()
		if n := d.connNode[o.Conn]; n != 0 {
			// "conn 7 A ..." becomes "conn 7 (node 2) A ...".
			prefix := fmt.Sprintf("conn %d", o.Conn)
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				line = fmt.Sprintf("%s (node %d)%s", prefix, n, rest)
			}
		}
		w.WriteString(line)
		if o.outcome() == outcomeUnknown {
			w.WriteString(" (unknown)")
		}
		w.WriteByte('\n')
	}

	// The client-level side: calls in Call order and writes at their
	// stamps, merged into one timeline, since what a worker believed when
	// it wrote is the point.
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	for i := range d.events {
		if e := &d.events[i]; e.Key == key {
			lines = append(lines, line{e.Call, e.String()})
		}
	}
	nEvents := len(lines)
	for i := range d.writes {
		if wr := &d.writes[i]; wr.Key == key {
			lines = append(lines, line{wr.At, wr.String()})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	fmt.Fprintf(w, "\n## Client events (%d) and fenced writes (%d), in time order (a call at its Call).\n", nEvents, len(lines)-nEvents)
	w.WriteString("## A call: worker (w0 is the prober), call and arguments, [Call, Return] -> outcome, and what it got.\n")
	w.WriteString("## A write: worker, token, stamp, the holder's sure interval then, the verdict, the register's token before it.\n")
	if d.eventsDropped > 0 || d.writesDropped > 0 {
		fmt.Fprintf(w, "## INCOMPLETE: %d events and %d writes (of all keys) were left out, their logs being full.\n", d.eventsDropped, d.writesDropped)
	}
	for _, l := range lines {
		w.WriteString(l.text)
		w.WriteByte('\n')
	}
}

// writeFaults writes faults.txt: the schedule drawn and the faults as
// injected, with their times on the recorder's clock.
func writeFaults(w *bufio.Writer, r *Result, schedule []Fault) {
	c := r.Config
	fmt.Fprintf(w, "# faults of the failed chaos run with seed %d: %v of workload, %d nodes (reproduce with: %s)\n", c.Seed, c.Duration, c.Nodes, c.reproduce())
	if c.NoFaults {
		w.WriteString("# NoFaults: none were drawn\n")
	}
	fmt.Fprintf(w, "\n## Schedule (%d drawn; the run injects those that fit in its time)\n", len(schedule))
	w.WriteString(scheduleText(schedule))
	fmt.Fprintf(w, "\n## Injected (%d), on the recorder's clock (ms, as in the history files), with the longest time without a grant each caused\n", len(r.Faults))
	for i, f := range r.Faults {
		gap := "?"
		if i < len(r.Gaps) {
			gap = r.Gaps[i].Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "  %3d. %s on %s, from %s to %s; no grant for %s\n", i+1, f.Kind, f.Target, appendMs(nil, f.Start), appendMs(nil, f.End), gap)
	}
}

// maxDetailOps bounds the wire ops a fence violation lists per holder: the
// history file has them all.
const maxDetailOps = 10

// fenceDetail explains the fence violation w, to follow its line: for each
// of the two holders (the rejected one, and the one whose token the
// register had taken) its Acquire and later calls as the worker saw them,
// and the wire ops of its token and of its Acquire's owner, marking which
// request got the token; then what that suggests. It shows at once whether
// a worker holds a token that the wire answered to another request (a
// pairing mix-up) or the server granted the second token inside the first
// one's lease.
func fenceDetail(w WriteEvent, events []CallEvent, h []Op) string {
	var b strings.Builder
	rej := explainHolder(&b, "rejected", w.Key, w.Worker, w.Token, w.At, events, h)
	held := explainHolder(&b, fmt.Sprintf("whose write the register took at %s", appendMs(nil, w.FenceAt)), w.Key, w.FenceWorker, w.Fence, w.FenceAt, events, h)
	b.WriteString("\n    => ")
	switch {
	case rej.mixup != "" || held.mixup != "":
		var parts []string
		for _, m := range []string{rej.mixup, held.mixup} {
			if m != "" {
				parts = append(parts, m)
			}
		}
		b.WriteString(strings.Join(parts, "; "))
	case rej.own != nil && held.own != nil:
		fmt.Fprintf(&b, "both tokens went to their holders' own requests: the server answered token %d (conn %d, at %s) while token %d's lease surely ran until %s (worker %d's Acquire or last extend was called then minus its lease): it ended that lease early, or granted over it",
			w.Fence, held.own.Conn, appendMs(nil, held.own.Return), w.Token, appendMs(nil, w.SureUntil), w.Worker)
	default:
		b.WriteString("the workload's log or the history lacks one of the grants: see the history file")
	}
	return b.String()
}

// holderFacts is what explainHolder found out about one holder.
type holderFacts struct {
	own   *Op    // the A answered OK with the token that names the worker's own owner, if any
	mixup string // when the wire gave the token only to other requests: says so
}

// explainHolder appends the lines of one holder of fenceDetail: worker's
// grant of token on key, as of at.
func explainHolder(b *strings.Builder, role, key string, worker int, token uint64, at time.Duration, events []CallEvent, h []Op) holderFacts {
	var facts holderFacts
	fmt.Fprintf(b, "\n    worker %d, token %d (%s):", worker, token, role)
	// The worker's Acquire of the grant is its last one of the token
	// before at, and its later calls on the grant follow it.
	acq := -1
	for i := range events {
		e := &events[i]
		if e.Call > at {
			break
		}
		if e.Worker == worker && e.Key == key && e.Token == token && e.isGrant() {
			acq = i
		}
	}
	if acq < 0 {
		fmt.Fprintf(b, " no Acquire of it by worker %d before %s in the workload's log", worker, appendMs(nil, at))
	} else {
		b.WriteString(" ")
		b.WriteString(events[acq].String())
		for i := acq + 1; i < len(events) && events[i].Call <= at; i++ {
			if e := &events[i]; e.Worker == worker && e.Key == key && e.Token == token {
				b.WriteString("; then ")
				b.WriteString(e.String())
			}
		}
	}
	owner := ""
	if acq >= 0 {
		owner = events[acq].Owner
	}

	var grants, others []*Op
	var lines []string
	queries := 0
	var firstQ, lastQ time.Duration
	for i := range h {
		o := &h[i]
		if o.Key != key {
			continue
		}
		granted := o.Op == codec.OpAcquire && o.Answered && o.Status == codec.StatusOK && o.RespToken == token
		switch {
		case o.Op == codec.OpQuery && o.Answered && o.Status == codec.StatusHeld && o.RespToken == token:
			// Queries may be many; their span is what matters.
			if queries == 0 {
				firstQ = o.Return
			}
			queries++
			lastQ = o.Return
			continue
		case granted, o.Op == codec.OpAcquire && owner != "" && o.Owner == owner,
			(o.Op == codec.OpExtend || o.Op == codec.OpRelease) && o.Token == token:
		default:
			continue
		}
		note := ""
		switch {
		case granted && owner != "" && o.Owner == owner:
			grants = append(grants, o)
			if facts.own == nil {
				facts.own = o
			}
			note = " <- the worker's own request got it"
		case granted:
			grants = append(grants, o)
			others = append(others, o)
			note = " <- ANOTHER request got it" + ownerOf(o.Owner, events)
		case o.Op == codec.OpAcquire && o.Answered && o.Status == codec.StatusOK:
			note = fmt.Sprintf(" <- the worker's own request, answered with token %d", o.RespToken)
		case o.Op == codec.OpAcquire:
			note = " <- an attempt of the worker's Acquire"
		}
		lines = append(lines, o.String()+note)
	}
	for i, l := range lines {
		if i == maxDetailOps {
			fmt.Fprintf(b, "\n      wire: ... and %d more (see the history file)", len(lines)-i)
			break
		}
		b.WriteString("\n      wire: ")
		b.WriteString(l)
	}
	if queries > 0 {
		fmt.Fprintf(b, "\n      wire: %d queries answered HELD %d, read from %s to %s", queries, token, appendMs(nil, firstQ), appendMs(nil, lastQ))
	}
	if len(lines) == 0 && queries == 0 {
		b.WriteString("\n      wire: no op of this token or owner")
	}
	switch {
	case acq < 0:
	case len(grants) == 0:
		facts.mixup = fmt.Sprintf("token %d was never answered to an acquire on the wire, yet worker %d got it from Acquire", token, worker)
	case facts.own == nil:
		o := others[0]
		facts.mixup = fmt.Sprintf("PAIRING MIX-UP: worker %d's Acquire (owner %s) returned token %d, which the wire answered only to other requests (first: conn %d's A naming owner %q%s): the client handed it an answer meant for another request",
			worker, owner, token, o.Conn, o.Owner, ownerOf(o.Owner, events))
	}
	return facts
}

// ownerOf names the worker whose Acquire named owner, as " (worker N's
// Acquire at T)", when the workload's log knows it.
func ownerOf(owner string, events []CallEvent) string {
	if owner == "" {
		return " (it named no owner)"
	}
	for i := range events {
		if e := &events[i]; e.Owner == owner && e.isGrant() {
			return fmt.Sprintf(" (worker %d's Acquire called at %s)", e.Worker, appendMs(nil, e.Call))
		}
	}
	return " (an Acquire that got no grant, or is not in the log)"
}
