// Package raftnet is baton's Raft transport: how the NodeHosts of a cluster
// exchange Raft message batches and snapshot chunks over TCP (or TLS). It
// implements dragonboat's raftio.ITransport and is plugged in through
// NodeHostConfig.Expert.TransportFactory; dragonboat's own layer above it
// (send queues per peer, batching of whatever is queued, snapshot
// streaming, the circuit breakers) is unchanged.
//
// # Why not dragonboat's TCP transport
//
// Its wire is the same idea, but each batch costs three write system calls
// (a magic number, a header, the payload) and its reader two or three
// reads, so each becomes several TCP segments and wake-ups of the peer. A
// three-node cluster sends a batch per shard round to every follower and
// gets one back from each, and on a small machine those system calls were
// a quarter of a leader's CPU (the cluster performance issue's profiles, in
// BENCHMARKS.md). Here a frame is written with one call, header and payload
// from one buffer, and read through a buffered reader, which takes a frame,
// or several, in one read.
//
// # Wire
//
// A connection starts with an 8-byte preamble from the dialling side,
// "batonrn1": a peer that speaks another transport (dragonboat's starts
// with its own magic number) is refused at once, and logged. Then frames,
// in both directions for snapshot connections and from the dialler only
// for message connections:
//
//	kind  u8   frameBatch, frameChunk, frameEnd or frameEndAck
//	size  u32  little endian, bytes of payload, at most maxFrame
//	crc   u32  CRC-32C (Castagnoli) of the payload
//	payload    a raftpb.MessageBatch or raftpb.Chunk, marshalled
//
// A snapshot connection ends with frameEnd, which the receiver answers with
// frameEndAck once it has handled every chunk before it; the sender closes
// the connection after the ack (or a short timeout), so that the last
// chunks are not lost to a reset. A frame that does not check (unknown
// kind, too large, wrong checksum, a payload that does not unmarshal) ends
// its connection; dragonboat then dials again. The dialler of a message
// connection notices at once when its peer goes away (a read returns; see
// messageConn), and sends the next batch on a new connection.
//
// Connections that carry Raft traffic are not compatible with dragonboat's
// transport: every node of a cluster must use the same one (batond's
// --raft-transport, the same on all nodes).
package raftnet
