package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	sm "github.com/baton-dev/baton/statemachine"
	"github.com/baton-dev/baton/status"
	"github.com/baton-dev/baton/tools/harness"
)

// TestPrintStatus pins the text a person reads, for a node of a cluster
// that lost the leader of one shard.
func TestPrintStatus(t *testing.T) {
	doc := &status.Node{
		ID: 2, Version: "v1.2.0", Revision: "3dca85b", Modified: true, GoVersion: "go1.26.8",
		FeatureLevel: 3, ClusterVersion: 2,
		StartedAt: time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC), UptimeSeconds: 3723.4,
		ClientAddr: "10.0.0.2:7700", RaftAddr: "10.0.0.2:7701", Held: 12, Waiters: 3,
		Problems: []string{"shard 2: no leader known"},
		Peers: []status.Peer{
			{ID: 1, ClientAddr: "10.0.0.1:7700", RaftAddr: "10.0.0.1:7701", Leads: []uint64{1}},
			{ID: 2, ClientAddr: "10.0.0.2:7700", RaftAddr: "10.0.0.2:7701", Self: true, Leads: []uint64{}},
		},
		Shards: []status.Shard{
			{ID: 1, LeaderID: 1, Role: status.RoleFollower, Term: 7, AppliedIndex: 1043, Held: 12},
			{ID: 2, Role: status.RoleFollower, Term: 8, AppliedIndex: 998, Waiters: 3, InflightProposals: 1},
		},
	}
	want := `node 2 of 2, client 10.0.0.2:7700, raft 10.0.0.2:7701: NOT HEALTHY
  shard 2: no leader known
version v1.2.0, revision 3dca85b (modified), go1.26.8
cluster version 2 (this build supports up to 3)
up 1h2m3s, since 2026-12-01T15:00:00Z
12 locks held, 3 acquires waiting

PEER           CLIENT         RAFT           LEADS SHARDS
1              10.0.0.1:7700  10.0.0.1:7701  1
2 (this node)  10.0.0.2:7700  10.0.0.2:7701  -

SHARD  LEADER  ROLE      SERVING  TERM  APPLIED  HELD  WAITERS  IN FLIGHT
1      1       follower  no       7     1043     12    0        0
2      none    follower  no       8     998      0     3        1
`
	var b bytes.Buffer
	printStatus(&b, doc)
	if b.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", b.String(), want)
	}

	// A node of a build from before cluster versions has neither field:
	// no line for them.
	doc.FeatureLevel, doc.ClusterVersion = 0, 0
	want = strings.Replace(want, "cluster version 2 (this build supports up to 3)\n", "", 1)
	b.Reset()
	printStatus(&b, doc)
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestStatus reads a live node's /status, as text and as JSON.
func TestStatus(t *testing.T) {
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, HTTP: true})
	c := harness.Dial(t, n.ClientAddr)
	c.Send("A status/k 60000 0")
	if line, err := c.ReadLine(5 * time.Second); err != nil || !strings.HasPrefix(line, "A status/k OK ") {
		t.Fatalf("acquire: %q, %v", line, err)
	}

	code, out, errs := runArgs(t, nil, "status", "--http", n.HTTPAddr)
	if code != exitOK || errs != "" {
		t.Fatalf("baton status: exit %d, stderr %q", code, errs)
	}
	for _, pattern := range []string{
		`^node 1 of 1, client ` + regexp.QuoteMeta(n.ClientAddr) + `, raft ` + regexp.QuoteMeta(n.RaftAddr) + `: healthy\n`,
		`\nversion \S+.*, go\d`,
		`\nup \d+s, since \d{4}-\d\d-\d\dT`,
		// (The acquire leaves the waiters just after its answer is sent.)
		`\n1 locks held, [01] acquires waiting\n`,
		`\n1 \(this node\) +` + regexp.QuoteMeta(n.ClientAddr) + ` +` + regexp.QuoteMeta(n.RaftAddr) + ` +1,2\n`,
		`\n1 +1 +leader +yes +[1-9]\d* +[1-9]\d* +[01] +[01] +\d\n2 +1 +leader +yes `,
	} {
		if !regexp.MustCompile(pattern).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", pattern, out)
		}
	}

	// --json is the document as served; BATON_HTTP stands in for --http.
	code, out, errs = runArgs(t, map[string]string{"BATON_HTTP": n.HTTPAddr}, "status", "--json")
	if code != exitOK || errs != "" {
		t.Fatalf("baton status --json: exit %d, stderr %q", code, errs)
	}
	var doc status.Node
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if doc.ID != 1 || doc.Held != 1 || !doc.Healthy || len(doc.Shards) != 2 || len(doc.Peers) != 1 ||
		fmt.Sprint(doc.Peers[0].Leads) != "[1 2]" || doc.UptimeSeconds <= 0 || doc.Version == "" ||
		doc.FeatureLevel != sm.FeatureLevel || doc.ClusterVersion < 1 {
		t.Errorf("--json: unexpected document:\n%s", out)
	}
}

func TestStatusFailures(t *testing.T) {
	dead := harness.FreeAddr(t) // nothing listens there
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "extra"}, exitBadUsage, `unexpected argument "extra"`},
		{[]string{"status", "--http", " "}, exitBadUsage, "--http: no address"},
		{[]string{"status", "--no-such-flag"}, exitBadUsage, "no-such-flag"},
		{[]string{"status", "--http", dead, "--timeout", "2s"}, exitFailed, "connection refused"},
	} {
		code, out, errs := runArgs(t, nil, c.args...)
		if code != c.code || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and one line with %q", c.args, code, out, errs, c.code, c.want)
		}
	}
}

func TestStatusHelp(t *testing.T) {
	code, out, _ := runArgs(t, nil, "status", "--help")
	if code != exitOK || !strings.Contains(out, "Exit status") {
		t.Fatalf("status --help: exit %d\n%s", code, out)
	}
	statusFlags(&statusOpts{}, func(string) string { return "" }).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out, "--"+f.Name+" ") {
			t.Errorf("status --help does not explain --%s", f.Name)
		}
	})
	if _, out, _ := runArgs(t, nil, "--help"); !strings.Contains(out, "  status ") || !strings.Contains(out, "BATON_HTTP") {
		t.Errorf("baton --help does not list status and BATON_HTTP:\n%s", out)
	}
}
