// Package bench is baton's load generator: the engine behind `baton bench`.
//
// It speaks the wire protocol directly (through package codec) over plain TCP
// connections, so that what it measures is the server and the network, not a
// client library. Each connection is driven by one goroutine that reads a
// batch of responses, reacts to each (pairing it with its request by the
// echoed op and key), and writes every request the batch caused in one write:
// a closed loop with a fixed number of requests in flight per connection.
//
// Workloads:
//
//   - uncontended: every connection keeps Depth lock cycles in flight, each on
//     a key no other cycle uses; a cycle is acquire, then release with the
//     granted token. It measures throughput and latency of the lock path
//     without queueing, and checks that tokens of a key only grow.
//   - hold: acquires Hold distinct keys with a long lease and keeps them while
//     IdleConns extra connections sit idle, so that the server's memory per
//     held lock and per idle connection can be read (Config.RSS).
//
// Run picks the workload by name; new workloads register in the workloads
// table.
package bench
