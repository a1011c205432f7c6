package client

import (
	"context"
	"time"
)

// Election is leader election on one key: the leader is the holder of the
// key's lock, and its value, which every candidate and observer reads, is
// the owner its acquire named. Made by Client.Election.
//
// The leader's lock is kept alive (Lock.KeepAlive), and its Done channel
// closes when leadership is lost, in time for the leader to stop acting
// before another candidate can be granted the key: the client counts the
// lease from when the acquire or the last extend was sent, not from when
// the server granted it, so its end comes no later than the server's,
// which is when the key can pass to the next candidate. A leader must
// stop what it does when Done closes, and pass its token (Lock.Token) to
// what it writes to, which can refuse a smaller one (fencing): that is
// what keeps a leader that was paused past its lease from doing harm.
type Election struct {
	cl    *Client
	key   string
	lease time.Duration
}

// Leader is who leads an election: the value its leader campaigned with
// and the token of its grant, or the zero Leader when nobody leads.
type Leader struct {
	Value string
	Token uint64
}

// Leading reports whether somebody leads.
func (l Leader) Leading() bool { return l.Token != 0 }

// Election returns the election on key, whose leaders hold it with lease
// (kept alive while they lead: a leader that dies is replaced within
// about a lease).
func (cl *Client) Election(key string, lease time.Duration) (*Election, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if _, err := leaseMs(lease); err != nil {
		return nil, err
	}
	return &Election{cl: cl, key: key, lease: lease}, nil
}

// Campaign waits until this candidate leads, or ctx ends, and returns its
// leadership: a lock of the key with value as its owner, kept alive. Its
// Done channel closes when leadership is lost; Release resigns, and the
// next candidate in line leads. value names the candidate to everybody
// (Leader, Observe): 1 to 64 bytes without spaces or control bytes, and
// one candidate's own (two candidates with one value would share the
// leadership: a campaign with the leader's value is that leader's retry,
// and gets its lock back). Candidates are served first come, first
// served.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	l, err := e.cl.Acquire(ctx, e.key, e.lease, WaitForever, WithOwner(value))
	if err != nil {
		return nil, err
	}
	l.KeepAlive()
	return l, nil
}

// Leader returns who leads now (committed: never older than what an
// earlier answered request changed).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	st, err := e.cl.Query(ctx, e.key)
	if err != nil {
		return Leader{}, err
	}
	return leaderOf(st), nil
}

// Observe returns a channel of the election's leaders: who leads now,
// then each change of leader, the zero Leader when nobody leads (between
// a leader's end and the next one's start, or when the election has no
// candidate). A leader seen again after the watch was started anew (see
// Client.Watch) is not sent twice in a row. The channel is closed when
// ctx ends or the client is closed.
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	states, err := e.cl.Watch(ctx, e.key)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		last, first := Leader{}, true
		for st := range states {
			l := leaderOf(st)
			if !first && l == last {
				continue
			}
			first, last = false, l
			select {
			case out <- l:
			case <-ctx.Done():
				for range states { // the watch ends with ctx: drain it
				}
				return
			}
		}
	}()
	return out, nil
}

// leaderOf is the Leader a key's state says.
func leaderOf(st State) Leader {
	if !st.Held {
		return Leader{}
	}
	return Leader{Value: st.Owner, Token: st.Token}
}
