// Package bench is baton's load generator: the engine behind `baton bench`.
//
// It speaks the wire protocol directly (through package codec) over plain TCP
// connections, so that what it measures is the server and the network, not a
// client library. Each connection is driven by one goroutine that reads a
// batch of responses, reacts to each (pairing it with its request by the
// echoed op and key), and writes every request the batch caused in one write.
// Nothing starts a goroutine per request.
//
// # Cycle workloads
//
// A connection runs Depth cycle slots; each slot is one client that runs
// lock cycles one after the other, with one request in flight at a time.
//
//   - uncontended: a cycle is A, then R with the granted token, on keys of
//     the slot's own. It measures throughput and latency of the lock path
//     without queueing.
//   - contended: a cycle is A (usually waiting forever) then R, on Keys
//     keys shared by all slots (slot j over all connections uses key j mod
//     Keys). It measures hand-offs per second and their latency, and
//     checks FIFO order (see below).
//   - mixed: a cycle is A, K (extend), Q (query) and R on keys of the slot's
//     own: a quarter of the requests each. Q must answer HELD with the
//     cycle's token.
//   - expiry: a cycle is a single A with a short lease on a key of the
//     slot's own, never released: the slot's next A of the same key waits
//     until the lease runs out and the server hands the lock on. It
//     measures expiries per second and the delay from a lease's end (its
//     grant read plus the lease: a slight underestimate, since the lease
//     began when the grant took effect) to the next grant.
//
// Pipelined load has two shapes (Config.Shape). The default is a sliding
// window: each slot sends its next request as soon as its last one is
// answered, so a connection never falls idle and the figure is the
// server's capacity. ShapeBatch (uncontended, over the wire, closed loop)
// sends rounds as a client library's pipeline does: each connection
// writes its Depth acquires at once, waits for every answer, writes the
// releases of the tokens granted at once, waits for every answer, and
// starts the next round; a round waits for its slowest answer, so besides
// each acquire's latency it reports each round's (Result.RoundUs), which
// is what the pipeline's caller waits for. An acquire answered TIMEOUT or
// an error has no release in its round.
//
// For every grant sequence the token of a key must grow: per slot for keys
// of a slot's own, across all connections for shared keys.
//
// With Permits (uncontended and contended), every acquire is S with that
// many permits instead of A: each key is a counting semaphore, and the
// contended workload checks a semaphore's promises instead of the
// exclusive lock's order (see keyLines), since up to Permits grants of a
// key can be made at once and read in any order.
//
// The FIFO check (contended). By causality, the grants of one key reach the
// client one after another in the server's order: a holder releases only
// after reading its grant, and the next grant follows that release. When a
// slot is granted a key, no other slot may still be waiting for the key
// with an acquire it sent more than FIFOSlack before the granted one: the
// server should have queued that older acquire first. The slack covers the
// one thing the client cannot see, the time between sending an acquire and
// the server reading it. A grant that breaks the rule counts as a FIFO
// violation, and `baton bench` then exits 1, as for a token that did not
// grow. A server that overtakes its queue (last come first served, random
// order) is caught within a second with 16 clients on one key.
//
// # Open loop
//
// With Rate set, each connection starts its cycles on a fixed schedule (a
// Pacer), whether or not the server keeps up, and a cycle's latency counts
// from when it should have started: a cycle that waited for a free slot
// because the server was slow carries that wait (no coordinated
// omission). A connection waiting for its next start sleeps in its read,
// with a deadline at that start; through the Go client (ViaClient), the
// cycle slots of a client share its Pacer and a free slot sleeps in
// Pacer.Wait until the client's next start. Drivers outside this package
// (tools/compare) pace their cycles with the same Pacer and report with
// Result.NoteBehind, so that a rate means the same everywhere.
//
// # Hold
//
// hold acquires Hold distinct keys with a long lease and keeps them while
// IdleConns extra connections sit idle, so that the server's memory per held
// lock and per idle connection can be read (Config.RSS).
//
// # Output
//
// Run returns a Result: rates, latency summaries (HdrHistogram), errors by
// kind, the order checks, a second-by-second Series and the headline
// latency's Percentiles; Result.WriteText prints it for a person,
// encoding/json for a script, and WritePlot draws it as SVG. Histogram lets
// drivers outside this package (tools/compare) measure other systems the
// same way. Run picks the workload by name; new workloads register in the
// workloads table.
package bench
