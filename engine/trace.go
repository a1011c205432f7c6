package engine

// With --log-level debug the shards log the decisions that end or keep a
// lease, which is what a fault run's failure needs explained (docs/testing.md):
// every Expire proposed, every internal command Raft dropped, every grant
// released because nobody was left to take it, and each change of serving.
// Never at the default level: these are per lease, not per shard. The
// callers check Node.tracing first, so that at other levels not even the
// arguments are built.

// trace logs one lease decision of s at debug level.
func (s *shard) trace(msg string, args ...any) {
	s.node.log.Debug(msg, append([]any{"shard", s.id}, args...)...)
}
