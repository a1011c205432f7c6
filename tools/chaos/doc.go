// Package chaos is baton's randomized fault run: a workload of clients
// takes and releases locks against a cluster while faults are injected, the
// wire traffic of every client connection is recorded, and the recorded
// history is then checked against a model of the lock service. A run passes
// only if every checker finds nothing.
//
// # Recording
//
// A Recorder wraps each client connection (Recorder.Wrap) and sees exactly
// what went over the wire: every request line written and every answer line
// read, each stamped on the recorder's monotonic clock. Call is taken just
// before the request's bytes are handed to the real Write, Return just after
// the real Read returned its answer, so the true interval of a request, from
// the moment the server could first see it to the moment its answer was
// sent, lies inside [Call, Return]. Answers are paired as a pipelining
// client pairs them: with the oldest outstanding request of the same (op,
// key) on the same connection. When the connection fails (its Read errs, or
// it is closed) its outstanding requests become unknown, and Finish makes
// the rest unknown at the end of the run. The owner an acquire names
// (protocol 1.1, Op.Owner) and the one a Q HELD shows (Op.RespOwner) are
// recorded with the rest. Anything that pairs with no
// request (a second answer, a "? - ERR" line) and any line that does not
// parse is a problem: the two ends disagree about the stream.
//
// # Checkers
//
// Check runs four checkers over the history:
//
//   - Linearizability, with porcupine, key by key, against a sequential
//     model of one key of the lock table (model.go). An answered op is
//     what it says. An A, R or K answered ERR (any code: "unavailable"
//     may still commit) or not at all is unknown: it may have taken effect
//     at any time after its Call, so it returns, for porcupine, after
//     everything else, and the model lets it have its effect or not. MOVED
//     means the node did not serve the request, and a query without a state
//     in its answer changes nothing; both are left out.
//   - Fencing tokens: per key, a grant answered before another was asked
//     for has the smaller token, no token is granted twice or seen for two
//     keys anywhere in the history, and every A OK and Q HELD of a token
//     shows the same owner. An owner's grant is the exception: acquires of
//     one key naming the same owner (retries of one acquire, or acquires
//     that waited together) are all answered with its token, so two A OK
//     with one token are legal for the same key and the same non-empty
//     owner, and for such a pair the real-time rule is "not smaller"
//     rather than "larger".
//   - Exactly one answer per request: every problem the recorder saw.
//   - Nothing hangs: every request was answered, or its connection failed,
//     within its own wait (for an A with wait_ms > 0) plus
//     CheckConfig.AnswerBound, from its Call. An A that waits forever is
//     exempt.
//
// A porcupine timeout is a finding too ("inconclusive"), never a pass. When
// porcupine finds a key not linearizable, the HTML visualization of that
// key's history and its longest partial linearizations is written to
// CheckConfig.OutDir and named in the report. When it runs out of time on
// a key, a cheaper sweep (sweep.go) goes through that key's calls and
// returns in time order and names the first op past which no linearization
// is left, if there is one: it lets ops of unknown outcome take effect any
// number of times, so it never flags what porcupine would pass.
//
// # When a run fails
//
// The run writes into its OutDir, besides summary.txt, what it takes to
// find out why, long after the cluster is gone, and names the files in
// the failure message: for every key a violation names, history-<key>.txt
// (the key made file-safe) with every wire op of the key (Op.String, in
// Call order) and, on one timeline, the workload's client-level events of
// the key (each Acquire, Extend, Release and Query with its times, lease,
// token, owner and outcome) and the fenced resource's writes (stamp,
// token, verdict, the holder's sure interval then); and faults.txt, with
// the schedule and the faults as injected. The workload's log is a slice
// of small structs per worker, bounded (maxEventsPerWorker, maxWrites).
//
// A fence violation's line explains itself: both holders' Acquire (call,
// return, lease, owner) and later extends, and the wire ops of their
// tokens and of their Acquire's owner, marking which request the wire
// answered with each token. The owner is what ties a worker's Acquire to
// its requests: a token answered on the wire only to another owner's
// request is a pairing mix-up in the client; two tokens answered to their
// own holders' requests mean the server granted the second inside the
// first's lease.
//
// # The model
//
// The state of a key is the holder the model knows of (a token and its
// owner, or none), expiryLB, maxToken, ghost (with its owner) and floor:
//
//   - expiryLB: the holder's lease surely does not end before it. It is the
//     Call of the acquire that granted the lock, or of the last extend that
//     succeeded, plus the lease asked for. The server starts a lease when it
//     applies the command, which is after the request was sent, and a new
//     leader restarts the leases it inherits, which only makes them later.
//     There is no upper bound: without a leader nothing expires, for as long
//     as that lasts.
//   - For an acquire with an owner, "the acquire that granted the lock" may
//     not be the one whose answer says so. Every attempt of one acquire (a
//     retry on another connection after MOVED, an ERR or a lost connection)
//     names the same owner, and the grant the retry is answered with may
//     have been made by an earlier attempt whose answer was lost, a phantom
//     to the model until then, with its lease running since. So the bound
//     is the least Call + lease among the acquires of that key and owner
//     sent before the answered one returned, including those answered
//     MOVED, TIMEOUT or ERR or not at all: any of them may have made the
//     grant, none sent later can have. Taking the answered attempt's own
//     Call would put the lease's end too late, and flag a correct server
//     that hands the key on when the first attempt's lease runs out.
//   - Owners: an A answered OK is either a new grant (the key may be free,
//     the token is above maxToken; the holder gets the acquire's owner) or,
//     when it names an owner, that owner's grant: the holder's token when
//     the holder has that owner (a retry, or one of several acquires of the
//     owner that waited together), which changes nothing at all, the lease
//     included. A Q HELD of the holder's token must show the holder's
//     owner: one grant has one owner. An owner's grant is never handed to
//     another owner, or to an acquire without one, and once it is released
//     or expired its token never comes back, to its owner either.
//   - An op may find the holder gone only if its Return is at or after
//     expiryLB: it is linearized before it returned, and the lease could not
//     have ended earlier. When the model uses that, floor becomes
//     max(floor, expiryLB), and an op linearized after it must have a Return
//     at or after floor; otherwise that order is illegal. This keeps time
//     consistent across a linearization: once one op has seen the lease end,
//     every op ordered after it happened after that end too, and an op that
//     returned earlier cannot be put there to hide a grant made while the
//     lease held.
//   - Phantoms: the server can hold a key for a grant nobody learns of: an
//     acquire whose answer was lost or unknown, a grant that raced with a
//     TIMEOUT (released at once, maybe after the TIMEOUT was sent), a grant
//     whose waiter's connection closed. So whenever the key has no known
//     holder, or its holder may be gone, a phantom may hold it and vanish at
//     any time: a try-lock may time out, and a query may see a holder nobody
//     was told of, as long as its token is new (above maxToken) or is the
//     phantom a query saw before (ghost), with the owner it showed then. A
//     phantom is never granted over a holder whose lease surely holds, and
//     its token is a real token: it raises maxToken like any other. A
//     phantom with an owner may be the grant of an attempt whose answer was
//     lost, so an A naming that owner may later be answered with the
//     ghost's token: the phantom becomes the known holder, with expiryLB as
//     above. Only that owner may: a phantom's token answered to anyone else
//     is a token granted twice.
//   - maxToken is the largest token seen so far (A OK, Q HELD): a grant must
//     bring a larger one.
//
// Why this never flags a correct server: every rule only forbids what the
// protocol forbids in real time. A lease is never assumed over before
// Call + lease_ms, which is no later than when a correct server may end it;
// an op is never assumed to see it over unless it returned after that; the
// floor only forbids orders in which an op would be linearized after its own
// Return. Grants, releases and queries of requests whose outcome is unknown
// are allowed both ways, and whatever the server may do that nobody is told
// of (phantoms) is allowed whenever the key could be free. The one
// assumption beyond the protocol text is that MOVED has no effect (on R and
// K; an A answered MOVED still counts as an attempt that may have made its
// owner's grant, which only weakens the lease bound). Owners add no
// assumption: the lease bound of an owner's grant is taken from the
// earliest attempt that may have made it, a retry's answer changes no
// state (least of all the lease), and a grant learned late through a retry
// is, until then, a phantom like any other. A second holder is still caught whenever
// the first one's lease surely holds: a new grant needs a free key, and an
// owner's token goes only to its owner. What the model does not try to do
// is notice a lease that was held too long: the protocol bounds that only
// by leadership, which the history cannot see. Nor does it flag a TIMEOUT
// to an acquire whose owner holds the key (the server should have answered
// OK): a node that lost its leadership without knowing it may answer that
// way, and a TIMEOUT harms nobody's exclusion.
package chaos
