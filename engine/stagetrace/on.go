//go:build stagetrace

package stagetrace

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	dsm "github.com/lni/dragonboat/v4/statemachine"
	"golang.org/x/sys/unix"
)

// On says that this is a probe build: the hooks record.
const On = true

// flushEvery is how often the events recorded are written out.
const flushEvery = 200 * time.Millisecond

var (
	// enabled: BATON_STAGETRACE names a directory to write to.
	enabled bool
	every   uint64 = 4 // BATON_STAGETRACE_EVERY

	// The clock: base is a time.Now whose monotonic reading was taken
	// at CLOCK_MONOTONIC baseMono (calibrate).
	base     time.Time
	baseMono int64
	baseErr  int64 // at most this far off, in ns

	mu     sync.Mutex
	events []event

	outMu sync.Mutex // Flush and SetNode: out
	out   *bufio.Writer
	node  bool // the node line is written
)

type event struct {
	kind                 Kind
	shard, peer          uint64
	proposer, seq, index uint64
	t                    int64
}

func init() {
	calibrate()
	dir := os.Getenv("BATON_STAGETRACE")
	if dir == "" {
		return
	}
	if s := os.Getenv("BATON_STAGETRACE_EVERY"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			fmt.Fprintf(os.Stderr, "stagetrace: BATON_STAGETRACE_EVERY=%q: a positive integer, please\n", s)
			os.Exit(2)
		}
		every = n
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("stages-%d.txt", os.Getpid())))
	if err != nil {
		fmt.Fprintf(os.Stderr, "stagetrace: %v\n", err)
		os.Exit(2)
	}
	out = bufio.NewWriterSize(f, 1<<16)
	fmt.Fprintf(out, "# stagetrace pid %d every %d clock_error_ns %d\n", os.Getpid(), every, baseErr)
	enabled = true
	go func() {
		for range time.Tick(flushEvery) {
			Flush()
		}
	}()
}

// calibrate anchors Now to CLOCK_MONOTONIC: of several time.Now calls
// bracketed by two clock_gettime calls, the one with the closest
// brackets, taken at their middle.
func calibrate() {
	baseErr = math.MaxInt64
	for range 50 {
		var a, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		t := time.Now()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		if d := (b.Nano() - a.Nano()) / 2; d < baseErr {
			base, baseMono, baseErr = t, a.Nano()+d, d
		}
	}
}

// Now is CLOCK_MONOTONIC in nanoseconds, comparable across processes on
// one machine (to within ClockError of each), read through Go's
// monotonic clock (vDSO, no system call).
func Now() int64 { return baseMono + int64(time.Since(base)) }

// ClockError bounds how far Now may be from CLOCK_MONOTONIC, in ns.
func ClockError() int64 { return baseErr }

// Since is Now's reading of the instant d nanoseconds after t (t from
// time.Now, with its monotonic reading), for a caller that keeps its own
// monotonic clock as a duration since an epoch.
func Since(t time.Time, d int64) int64 { return baseMono + int64(t.Sub(base)) + d }

// Mark is a time kept for a later event (a shard's first command's read
// time, until its batch is proposed).
type Mark struct{ t int64 }

// Set keeps t.
func (m *Mark) Set(t int64) { m.t = t }

// Take returns the time kept, 0 if none, and forgets it.
func (m *Mark) Take() int64 {
	t := m.t
	m.t = 0
	return t
}

// Sampled says whether the command batch of sequence number seq is
// traced.
func Sampled(seq uint64) bool { return enabled && seq%every == 0 }

// Flush writes out what was recorded since the last flush.
func Flush() {
	mu.Lock()
	evs := events
	events = make([]event, 0, max(64, len(evs)))
	mu.Unlock()
	if !enabled {
		return
	}
	outMu.Lock()
	defer outMu.Unlock()
	buf := make([]byte, 0, 64)
	for _, e := range evs {
		buf = append(buf[:0], e.kind.String()...)
		for _, v := range [...]uint64{e.shard, e.proposer, e.seq, e.index, e.peer} {
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, v, 10)
		}
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, e.t, 10)
		buf = append(buf, '\n')
		_, _ = out.Write(buf)
	}
	_ = out.Flush()
}

func record(e event) {
	mu.Lock()
	events = append(events, e)
	mu.Unlock()
}

// SetNode records which replica this process is.
func SetNode(id uint64) {
	if !enabled {
		return
	}
	outMu.Lock()
	defer outMu.Unlock()
	if !node {
		node = true
		_, _ = fmt.Fprintf(out, "node %d\n", id)
	}
}

// Proposed records a batch handed to dragonboat at propose, and read, the
// time its first command's input was read, if known (not 0).
func Proposed(shard, proposer, seq uint64, read, propose int64) {
	if !Sampled(seq) {
		return
	}
	if read != 0 {
		record(event{kind: Read, shard: shard, proposer: proposer, seq: seq, t: read})
	}
	record(event{kind: Propose, shard: shard, proposer: proposer, seq: seq, t: propose})
}

// Applied records a batch entry's apply and answer times.
func Applied(shard, index, proposer, seq uint64, apply, answer int64) {
	if !Sampled(seq) {
		return
	}
	record(event{kind: Apply, shard: shard, proposer: proposer, seq: seq, index: index, t: apply})
	record(event{kind: Answer, shard: shard, proposer: proposer, seq: seq, index: index, t: answer})
}

// Committed records the commit, at t, of the sampled entries that
// updates (one SaveRaftState, begun at t) hand to the apply worker.
func Committed(updates []pb.Update, t int64) {
	if !enabled {
		return
	}
	for i := range updates {
		u := &updates[i]
		for j := range u.CommittedEntries {
			e := &u.CommittedEntries[j]
			if p, seq, ok := BatchOf(e); ok && Sampled(seq) {
				record(event{kind: Commit, shard: u.ShardID, proposer: p, seq: seq, index: e.Index, t: t})
			}
		}
	}
}

// Saved records, for the sampled entries of updates (one
// SaveRaftState), when the save began, when its record was written and
// when it was synced.
func Saved(updates []pb.Update, save, write, sync int64) {
	if !enabled {
		return
	}
	for i := range updates {
		u := &updates[i]
		for j := range u.EntriesToSave {
			e := &u.EntriesToSave[j]
			if p, seq, ok := BatchOf(e); ok && Sampled(seq) {
				ev := event{shard: u.ShardID, proposer: p, seq: seq, index: e.Index}
				for _, k := range [...]struct {
					k Kind
					t int64
				}{{Save, save}, {Write, write}, {Sync, sync}} {
					ev.kind, ev.t = k.k, k.t
					record(ev)
				}
			}
		}
	}
}

// Updating records the start of a state machine Update of ents (the
// statemachine package's hook: statemachine.SetUpdateHook).
func Updating(shard uint64, ents []dsm.Entry) {
	if !enabled {
		return
	}
	t := Now()
	for i := range ents {
		if p, seq, ok := batchOf(ents[i].Cmd); ok && Sampled(seq) {
			record(event{kind: Update, shard: shard, proposer: p, seq: seq, index: ents[i].Index, t: t})
		}
	}
}

// BatchSent records a message batch handed to a peer's socket at t (the
// time the transport began to write it).
func BatchSent(b *pb.MessageBatch, t int64) { messages(b, t, Sent, AckSent) }

// BatchReceived records a message batch read from a peer at t.
func BatchReceived(b *pb.MessageBatch, t int64) { messages(b, t, Recv, AckRecv) }

// messages records the sampled entries of b's Replicate messages as
// entries, and its ReplicateResp messages that accept entries as acks.
func messages(b *pb.MessageBatch, t int64, entries, acks Kind) {
	if !enabled {
		return
	}
	for i := range b.Requests {
		m := &b.Requests[i]
		peer := m.To
		if entries == Recv {
			peer = m.From
		}
		switch m.Type {
		case pb.Replicate:
			for j := range m.Entries {
				e := &m.Entries[j]
				if p, seq, ok := BatchOf(e); ok && Sampled(seq) {
					record(event{kind: entries, shard: m.ShardID, proposer: p, seq: seq, index: e.Index, peer: peer, t: t})
				}
			}
		case pb.ReplicateResp:
			if !m.Reject {
				record(event{kind: acks, shard: m.ShardID, index: m.LogIndex, peer: peer, t: t})
			}
		}
	}
}
