package main

// baton status: a node's /status (package status), printed for a person,
// or as the node serves it with --json.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/status"
)

const statusUsage = `baton status: show what a node knows of itself and of its cluster.

Usage:
  baton status [flags]

Reads /status from a batond started with --http ADDR and prints it: the
node, its version and uptime, whether it can serve or redirect every shard
(what /healthz answers), its peers and the shards each leads, and for each
shard its leader, this node's role, the Raft term, the applied index, the
locks held and the acquires waiting.

The secret goes to the node as "Authorization: Bearer" (a node with
--auth-file wants it), and --tls speaks HTTPS (a node with --http-tls).

Flags:
  --http ADDR        the node's --http address, host:port or an http:// URL
                     (default $BATON_HTTP, else ` + defaultHTTPAddr + `)
  --timeout DURATION how long to wait for the node's answer (default 10s)
  --json             print the document as the node serves it (its fields
                     are in docs/protocol.md)
` + securityHelp + `  --help             show this text

Exit status: 0 printed (a node that is not healthy too: see /healthz for a
check); 1 the node could not be reached or did not answer a status;
2 bad usage; 130 interrupted.
`

type statusOpts struct {
	http    string
	json    bool
	timeout time.Duration
	sec     securityOpts
}

func statusFlags(o *statusOpts, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton status", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	httpFlag(fs, &o.http, getenv)
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "")
	fs.BoolVar(&o.json, "json", false, "")
	securityFlags(fs, &o.sec, getenv)
	return fs
}

func runStatus(e env, args []string) int {
	var o statusOpts
	fs := statusFlags(&o, e.getenv)
	if _, code, done := parseCommand(e, "status", statusUsage, fs, args, 0, 0); done {
		return code
	}
	url, err := nodeURL(o.http, "/status")
	if err != nil {
		return usageError(e, "status", err)
	}

	ctx, cancel := limited(e, o.timeout)
	defer cancel()
	body, url, err := fetchStatus(ctx, url, &o.sec)
	if err != nil {
		return failure(e, "status", err)
	}
	var doc status.Node
	if err := json.Unmarshal(body, &doc); err != nil {
		return failure(e, "status", fmt.Errorf("%s: not a status document: %v", url, err))
	}
	if o.json {
		_, _ = e.stdout.Write(body)
		return exitOK
	}
	printStatus(e.stdout, &doc)
	return exitOK
}

// fetchStatus GETs the node's /status at url and returns the body, and
// the URL it came from.
func fetchStatus(ctx context.Context, url string, sec *securityOpts) ([]byte, string, error) {
	resp, url, err := adminGet(ctx, url, sec)
	if err != nil {
		return nil, url, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, url, fmt.Errorf("%s: %v", url, err)
	}
	return body, url, nil
}

// printStatus writes doc for a person: the node, its peers, its shards.
func printStatus(w io.Writer, doc *status.Node) {
	health := "healthy"
	if !doc.Healthy {
		health = "NOT HEALTHY"
	}
	fmt.Fprintf(w, "node %d of %d, client %s, raft %s: %s\n", doc.ID, len(doc.Peers), doc.ClientAddr, doc.RaftAddr, health)
	for _, p := range doc.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	build := "version " + doc.Version
	if doc.Revision != "" {
		build += ", revision " + doc.Revision
		if doc.Modified {
			build += " (modified)"
		}
	}
	fmt.Fprintf(w, "%s, %s\n", build, doc.GoVersion)
	if doc.FeatureLevel > 0 { // 0: a build from before cluster versions
		fmt.Fprintf(w, "cluster version %d (this build supports up to %d)\n", doc.ClusterVersion, doc.FeatureLevel)
	}
	uptime := time.Duration(doc.UptimeSeconds * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(w, "up %v, since %s\n", uptime, doc.StartedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "%d locks held, %d acquires waiting\n\n", doc.Held, doc.Waiters)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tCLIENT\tRAFT\tLEADS SHARDS")
	for _, p := range doc.Peers {
		id := strconv.FormatUint(p.ID, 10)
		if p.Self {
			id += " (this node)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, p.ClientAddr, p.RaftAddr, idList(p.Leads))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tLEADER\tROLE\tSERVING\tTERM\tAPPLIED\tHELD\tWAITERS\tIN FLIGHT")
	for _, s := range doc.Shards {
		leader, serving := "none", "no"
		if s.LeaderID != 0 {
			leader = strconv.FormatUint(s.LeaderID, 10)
		}
		if s.Serving {
			serving = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n",
			s.ID, leader, s.Role, serving, s.Term, s.AppliedIndex, s.Held, s.Waiters, s.InflightProposals)
	}
	_ = tw.Flush()
}

// idList is "1,2,3", or "-" for none.
func idList(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ",")
}
