package main

import (
	"github.com/baton-dev/baton/client"
)

const watchUsage = `baton watch: print a key's holders, then each change, until interrupted.

Usage:
  baton watch KEY [flags]

Prints the key's committed state as query does, then one line each time a
commit changes its holders (protocol 1.4, W): every grant with its token,
"free" each time the key is freed. An extend prints nothing. When the node
that leads the key changes, or the connection is lost, the watch goes on
on the new leader and prints the state there first. SIGINT or SIGTERM
ends it (exit status 0).

Flags:
` + commonHelp + `  --json             print each state as one JSON object, as query --json
  --help             show this text

--timeout bounds the first state only: a watch that has started retries for
as long as it runs.

JSON: one object per line, as query --json prints them (and, while shared
holds hold the key, {"key":"K","held":false,"holders":N,"permits":N}).

Exit status: 0 interrupted after the watch started; 1 failure (no server
answered within --timeout, a refused secret); 2 bad usage.
`

func runWatch(e env, args []string) int {
	var o commonOpts
	fs := plainFlags("watch", &o, e.getenv)
	pos, code, done := parseCommand(e, "watch", watchUsage, fs, args, 1, 1)
	if done {
		return code
	}
	key := pos[0]
	c, code, ok := dial(e, "watch", &o)
	if !ok {
		return code
	}
	defer c.Close()
	// The first state comes from a Query bounded by --timeout, so that a
	// wrong address or secret fails at once with its reason; the watch
	// then starts with the state again.
	ctx, cancel := limited(e, o.timeout)
	_, err := c.Query(ctx, key)
	cancel()
	if err != nil {
		return failure(e, "watch", err)
	}
	states, err := c.Watch(e.ctx, key)
	if err != nil {
		return failure(e, "watch", err)
	}
	for st := range states {
		printState(e.stdout, o.json, key, st)
	}
	if e.ctx.Err() == nil {
		// Closed before an interrupt: a server refused the secret.
		return failure(e, "watch", client.ErrAuth)
	}
	return exitOK
}
