// Package stagetrace times a request's path through a baton cluster, stage
// by stage, on every node: read and parsed, proposed, the leader's log
// write and flush, sent, the follower's receipt, write and flush, its ack
// sent and received, commit, apply, answer written (issue 30; the figures
// are in BENCHMARKS.md, "Where a commit's time goes").
//
// It is a probe build: only a batond built with -tags stagetrace records
// anything. In a normal build On is the constant false and every hook is
// an empty function, so each call site, guarded by `if stagetrace.On`,
// compiles to nothing (as engine/mutation_off.go does for the chaos run's
// planted bugs).
//
// A traced batond records when BATON_STAGETRACE names a directory: each
// process writes its events to DIR/stages-PID.txt, a few times a second.
// BATON_STAGETRACE_EVERY=N (default 4) samples one command batch in N, by
// the proposer's sequence number, which every node reads from the entry
// itself, so that all nodes sample the same entries without talking. The
// acknowledgements (ReplicateResp) carry only an index, not the entries,
// so every one is recorded; tools/stagetrace joins them to the entries
// they cover.
//
// Times are CLOCK_MONOTONIC in nanoseconds, which every process on one
// machine shares: the nodes of a benchmark cluster on one machine can be
// compared event for event. (Now reads Go's monotonic clock, which is
// CLOCK_MONOTONIC on Linux, anchored to one clock_gettime reading at
// start.)
//
// Each line of a file is one event:
//
//	KIND SHARD PROPOSER SEQ INDEX PEER T
//
// KIND is one of the Kind constants' names; PROPOSER and SEQ name the
// command batch (its header, statemachine.Header), INDEX its Raft index
// (0 where it is not known yet: read and propose), PEER the other replica
// of a message (0 for events that are not), T the time. A line "node ID"
// says which replica the process is; acks have PROPOSER and SEQ 0 and the
// acknowledged index (LogIndex) as INDEX.
package stagetrace

import (
	"encoding/binary"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Kind is what an event marks.
type Kind uint8

// The events, in the order a request meets them.
const (
	// Read: the leader's event loop began serving the input that held the
	// first command of the batch (engine.serveLines).
	Read Kind = iota + 1
	// Propose: the batch is handed to dragonboat (NodeHost.Propose).
	Propose
	// Sent: the leader's transport wrote a Replicate message carrying the
	// entry to PEER's socket (raftnet).
	Sent
	// Recv: a follower's transport read a Replicate message carrying the
	// entry from PEER, before handing it to dragonboat (raftnet).
	Recv
	// Save: a step worker began saving an update with the entry
	// (seglog.SaveRaftState).
	Save
	// Write: its record is written to the log file (not yet synced).
	Write
	// Sync: the record is synced (fdatasync returned).
	Sync
	// AckSent: a follower sent PEER a ReplicateResp acknowledging every
	// entry up to INDEX (raftnet).
	AckSent
	// AckRecv: the leader read a ReplicateResp from PEER acknowledging
	// every entry up to INDEX (raftnet).
	AckRecv
	// Commit: a step worker began saving an update that hands the entry,
	// committed, to the apply worker (the first update whose
	// CommittedEntries hold it).
	Commit
	// Update: dragonboat's apply worker hands the entry (with the others
	// of its batch) to the state machine (statemachine's Update begins).
	Update
	// Apply: the state machine applied the entry to the table and tells
	// the engine (engine.Node.Applied).
	Apply
	// Answer: the engine has written the entry's answers to the clients'
	// sockets, or handed them to the event loops where it could not write
	// directly (the end of Node.Applied).
	Answer
	numKinds
)

var kindNames = [numKinds]string{
	Read: "read", Propose: "propose", Sent: "sent", Recv: "recv",
	Save: "save", Write: "write", Sync: "sync", AckSent: "acksent",
	AckRecv: "ackrecv", Commit: "commit", Update: "update", Apply: "apply", Answer: "answer",
}

// String is the kind's name in a trace file.
func (k Kind) String() string {
	if k == 0 || k >= numKinds {
		return "?"
	}
	return kindNames[k]
}

// ParseKind is the Kind named s, false if s names none.
func ParseKind(s string) (Kind, bool) {
	for k := Read; k < numKinds; k++ {
		if kindNames[k] == s {
			return k, true
		}
	}
	return 0, false
}

// headerLen is the size of a command batch's header
// (statemachine/encoding.go): version u8, proposer u64, seq u64, commands
// u32, little endian.
const headerLen = 21

// BatchOf returns the proposer and sequence number of an entry that is a
// baton command batch, one with at least one command; ok is false for
// anything else (fences, hand-offs, level reports, directory writes, an
// empty entry, dragonboat's configuration changes). It reads the header's
// fixed offsets only, so this package needs nothing of statemachine.
//
// dragonboat stores what NodeHost.Propose is given as an EncodedEntry: a
// byte of its own (0: format 0, not compressed, no session; baton
// configures no compression), then the bytes proposed.
func BatchOf(e *pb.Entry) (proposer, seq uint64, ok bool) {
	cmd := e.Cmd
	switch {
	case e.Type == pb.EncodedEntry && len(cmd) > 0 && cmd[0] == 0:
		cmd = cmd[1:]
	case e.Type == pb.ApplicationEntry:
	default:
		return 0, 0, false
	}
	return batchOf(cmd)
}

// batchOf is BatchOf of the bytes proposed (what the state machine's
// Update gets as an entry's Cmd).
func batchOf(cmd []byte) (proposer, seq uint64, ok bool) {
	if len(cmd) < headerLen || binary.LittleEndian.Uint32(cmd[17:]) == 0 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(cmd[1:]), binary.LittleEndian.Uint64(cmd[9:]), true
}
