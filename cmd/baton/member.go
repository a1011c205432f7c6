package main

// baton member: list, add, remove and reorder the cluster's members
// (protocol 1.3), through package client's membership requests, over the
// client port like the lock commands (--addr, TLS, the secret).

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/client"
)

var memberUsage = `baton member: list, add, remove and reorder the cluster's members.

Usage:
  baton member list [flags]
  baton member add RAFT_ADDR/CLIENT_ADDR [--tls-listen ADDR] [flags]
  baton member remove ID [--force] [flags]
  baton member priority ID,ID,... [flags]

list prints the members in priority order: the voters, the preferred
leader first, then the learners in the order they were added.

add adds a new member, as a learner, at the addresses its batond will
serve (its Raft and client addresses, and with --tls-listen its TLS
client address), and prints its id and the command that starts it:
  batond --id ID --join RAFT_ADDR/CLIENT_ADDR --data DIR
(DIR empty or absent, and the flags the other members run with, such as
--auth-file). It catches up from the cluster, which promotes it to voter
by itself.

remove removes a member, voter or learner, the leader too. It is refused
when it would remove the last voter, or when the voters left would not
have a live majority; --force skips that second check only (for a member
that is gone for good while too few others are live).

priority sets the leadership priority: every voter's id once, the
preferred leader first.

The requests go to any member given by --addr, which passes them on to the
member that coordinates changes. One change is made at a time: a change
refused because another is under way can be tried again.

Flags:
  --tls-listen ADDR  (add) the new member's own TLS client address, its
                     batond --tls-listen (it does not make this command
                     speak TLS: --tls and the flags below do)
  --force            (remove) skip the live-majority check
` + memberCommonHelp + jsonHelp + `  --help             show this text

JSON:
  list      {"members":[{"id":1,"raft":"HOST:PORT","client":"HOST:PORT",
            "role":"voter","tls":"HOST:PORT"},...]} (tls only for a member
            that serves TLS; role voter or learner)
  add       {"id":N,"raft":"HOST:PORT","client":"HOST:PORT","role":"learner",
            "tls":"HOST:PORT","command":"batond --id N --join ..."}
  remove    {"id":N,"removed":true}
  priority  {"priority":[N,...]}

Exit status: 0 done; 1 failure: refused (the reason on stderr; nothing was
changed), no member reachable, no leader for --timeout, a server from
before membership; 2 bad usage; 130 interrupted.
`

// memberTimeout is the default --timeout of member: a change is answered
// once every shard has committed it, and a remove of the leader waits for
// its hand-off.
const memberTimeout = 30 * time.Second

// memberCommonHelp is commonHelp with member's --timeout.
var memberCommonHelp = strings.Replace(commonHelp,
	`  --timeout DURATION how long to keep trying when no server answers or the
                     cluster has no leader (acquire: on top of --wait; not
                     applied to a wait of 0, which waits forever) (default 10s)
`, `  --timeout DURATION how long to wait for the answer (default 30s)
`, 1)

// memberOpts are the flags of member's subcommands.
type memberOpts struct {
	commonOpts
	tlsListen string
	force     bool
}

// memberFlags defines the flags of member SUB (--tls-listen for add,
// --force for remove).
func memberFlags(sub string, o *memberOpts, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton member "+sub, flag.ContinueOnError)
	commonFlags(fs, &o.commonOpts, getenv, true)
	o.timeout = memberTimeout
	fs.Lookup("timeout").DefValue = memberTimeout.String()
	switch sub {
	case "add":
		fs.StringVar(&o.tlsListen, "tls-listen", "", "")
	case "remove":
		fs.BoolVar(&o.force, "force", false, "")
	}
	return fs
}

func runMember(e env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(e.stderr, "baton member: missing list, add, remove or priority (see baton member --help)\n")
		return exitBadUsage
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, memberUsage)
		return exitOK
	case "list", "add", "remove", "priority":
	default:
		fmt.Fprintf(e.stderr, "baton member: unknown subcommand %q: want list, add, remove or priority (see baton member --help)\n", sub)
		return exitBadUsage
	}
	name := "member " + sub
	var o memberOpts
	fs := memberFlags(sub, &o, e.getenv)
	pos, err := parseArgs(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, memberUsage)
		return exitOK
	}
	if err != nil {
		return usageError(e, name, err)
	}
	want := 1
	if sub == "list" {
		want = 0
	}
	switch {
	case len(pos) > want:
		return usageError(e, name, fmt.Errorf("unexpected argument %q", pos[want]))
	case len(pos) < want && sub == "add":
		return usageError(e, name, errors.New("missing RAFT_ADDR/CLIENT_ADDR"))
	case len(pos) < want && sub == "remove":
		return usageError(e, name, errors.New("missing ID"))
	case len(pos) < want:
		return usageError(e, name, errors.New("missing the ids (ID,ID,...)"))
	}
	// Arguments are checked before anything is dialled, so that a typo is
	// a usage error, not a server's answer.
	var (
		addrs client.MemberAddrs
		id    uint64
		ids   []uint64
	)
	switch sub {
	case "add":
		if addrs, err = parseNewMember(pos[0], o.tlsListen); err != nil {
			return usageError(e, name, err)
		}
	case "remove":
		if id, err = parseMemberID(pos[0]); err != nil {
			return usageError(e, name, err)
		}
	case "priority":
		if ids, err = parsePriority(pos[0]); err != nil {
			return usageError(e, name, err)
		}
	}

	c, code, ok := dial(e, name, &o.commonOpts, oneShot)
	if !ok {
		return code
	}
	defer c.Close()
	ctx, cancel := limited(e, o.timeout)
	defer cancel()
	switch sub {
	case "list":
		members, err := c.ListMembers(ctx)
		if err != nil {
			return memberFailure(e, name, err)
		}
		printMembers(e, members, o.json)
	case "add":
		id, err := c.AddMember(ctx, addrs)
		if err != nil {
			return memberFailure(e, name, err)
		}
		printAdded(e, id, addrs, o.json)
	case "remove":
		if err := c.RemoveMember(ctx, id, o.force); err != nil {
			return memberFailure(e, name, err)
		}
		if o.json {
			printJSON(e.stdout, map[string]any{"id": id, "removed": true})
		} else {
			fmt.Fprintf(e.stdout, "removed member %d\n", id)
		}
	case "priority":
		if err := c.SetMemberPriority(ctx, ids); err != nil {
			return memberFailure(e, name, err)
		}
		if o.json {
			printJSON(e.stdout, map[string]any{"priority": ids})
		} else {
			fmt.Fprintf(e.stdout, "priority order: %s\n", pos[0])
		}
	}
	return exitOK
}

// parseNewMember reads add's RAFT_ADDR/CLIENT_ADDR and --tls-listen.
func parseNewMember(arg, tlsAddr string) (client.MemberAddrs, error) {
	raft, clientAddr, ok := strings.Cut(arg, "/")
	if !ok || strings.Contains(clientAddr, "/") {
		return client.MemberAddrs{}, fmt.Errorf("%q: want RAFT_ADDR/CLIENT_ADDR, each host:port", arg)
	}
	m := client.MemberAddrs{Raft: raft, Client: clientAddr, TLS: tlsAddr}
	for _, f := range []struct{ what, addr string }{{"RAFT_ADDR", raft}, {"CLIENT_ADDR", clientAddr}, {"--tls-listen", tlsAddr}} {
		if f.addr == "" && f.what == "--tls-listen" {
			continue
		}
		if !validHostPort(f.addr) {
			return client.MemberAddrs{}, fmt.Errorf("%s %q: want host:port", f.what, f.addr)
		}
	}
	return m, nil
}

// validHostPort reports whether addr is host:port with a host and a port
// from 1 to 65535, and nothing that would end a field of the request.
func validHostPort(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(addr, "/, \t") {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p > 0
}

// parseMemberID reads a member id.
func parseMemberID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("bad member id %q: want a number from 1 (see baton member list)", s)
	}
	return id, nil
}

// parsePriority reads priority's ID,ID,...: every id once.
func parsePriority(s string) ([]uint64, error) {
	var ids []uint64
	seen := make(map[uint64]bool)
	for _, f := range strings.Split(s, ",") {
		id, err := parseMemberID(f)
		if err != nil {
			return nil, err
		}
		if seen[id] {
			return nil, fmt.Errorf("member %d named twice in %q: want every voter's id once", id, s)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

// memberJSON is one member in list's --json.
type memberJSON struct {
	ID     uint64 `json:"id"`
	Raft   string `json:"raft"`
	Client string `json:"client"`
	Role   string `json:"role"`
	TLS    string `json:"tls,omitempty"`
}

func printMembers(e env, members []client.Member, asJSON bool) {
	if asJSON {
		list := make([]memberJSON, len(members))
		for i, m := range members {
			list[i] = memberJSON{ID: m.ID, Raft: m.Raft, Client: m.Client, Role: m.Role, TLS: m.TLS}
		}
		printJSON(e.stdout, map[string]any{"members": list})
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tRAFT\tCLIENT\tTLS")
	for _, m := range members {
		tlsAddr := m.TLS
		if tlsAddr == "" {
			tlsAddr = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", m.ID, m.Role, m.Raft, m.Client, tlsAddr)
	}
	_ = tw.Flush()
}

// startCommand is the command that starts the member add made.
func startCommand(id uint64, addrs client.MemberAddrs) string {
	cmd := fmt.Sprintf("batond --id %d --join %s/%s --data DIR", id, addrs.Raft, addrs.Client)
	if addrs.TLS != "" {
		cmd += " --tls-listen " + addrs.TLS + " --tls-cert FILE --tls-key FILE"
	}
	return cmd
}

func printAdded(e env, id uint64, addrs client.MemberAddrs, asJSON bool) {
	cmd := startCommand(id, addrs)
	if asJSON {
		v := map[string]any{"id": id, "raft": addrs.Raft, "client": addrs.Client, "role": client.RoleLearner, "command": cmd}
		if addrs.TLS != "" {
			v["tls"] = addrs.TLS
		}
		printJSON(e.stdout, v)
		return
	}
	fmt.Fprintf(e.stdout, "added member %d, a learner until it has caught up; start it with:\n  %s\n", id, cmd)
}

// memberFailure reports a member request that failed, in one line, and
// picks the exit status.
func memberFailure(e env, name string, err error) int {
	if e.ctx.Err() != nil {
		return failure(e, name, err)
	}
	var se *client.ServerError
	switch {
	case errors.Is(err, client.ErrRefused) && errors.As(err, &se):
		reason := se.Text
		if reason == "" {
			reason = "no reason given"
		}
		fmt.Fprintf(e.stderr, "baton %s: refused: %s\n", name, reason)
		return exitFailed
	case errors.Is(err, client.ErrUnsupported):
		fmt.Fprintf(e.stderr, "baton %s: the server does not know membership requests: a batond from before protocol 1.3?\n", name)
		return exitFailed
	}
	// The client's error names the request, as the command's name does.
	msg := strings.TrimPrefix(err.Error(), "baton: "+name+": ")
	if errors.Is(err, client.ErrUnavailable) && strings.Contains(msg, "may or may not") {
		msg += " (see baton member list)"
	}
	return failure(e, name, &reworded{msg: msg, err: err})
}

// reworded is err with another message (failure still sees what it
// wraps, a deadline say).
type reworded struct {
	msg string
	err error
}

func (r *reworded) Error() string { return r.msg }
func (r *reworded) Unwrap() error { return r.err }
