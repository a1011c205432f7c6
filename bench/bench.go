package bench

import "context"

// Run runs the workload cfg names and returns what it measured. It returns
// an error only when the run cannot start (a bad Config, a server that
// cannot be reached); failures during the run are counted in the Result.
// Cancelling ctx ends the run early, like reaching Duration: nothing new is
// sent, outstanding requests get a few seconds to be answered, and the
// Result covers what was done.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return workloads[cfg.Workload](ctx, &cfg)
}
