package main_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/engine"
	sm "github.com/baton-dev/baton/statemachine"
	"github.com/baton-dev/baton/tools/harness"
)

// Backups (GET /backup) and batond --restore: a new cluster started from a
// backup holds the old cluster's locks, and its tokens go on above every
// token the old cluster issued, before the backup or after it: each
// restore starts the next restore epoch (statemachine.TokenEpoch).

// backupLock is a lock of the old cluster as the test took it.
type backupLock struct {
	key, owner string
	token      uint64
}

// oldLocks takes locks on c, every shard of 4 among them: two in three
// held (every other one with an owner), the rest released, and on each
// shard a last grant released, so that every shard's token counter is
// above the tokens it holds. It returns the held locks, the freed keys and
// the highest token each shard issued.
func oldLocks(t *testing.T, c *harness.Conn) (held []backupLock, freed []string, maxToken map[uint64]uint64) {
	t.Helper()
	maxToken = map[uint64]uint64{}
	take := func(key, owner string) uint64 {
		tok := takeKey(t, c, key, owner)
		shard := tok & 1023 // the token's low bits are its shard (statemachine)
		maxToken[shard] = max(maxToken[shard], tok)
		return tok
	}
	release := func(key string, tok uint64) {
		releaseKey(t, c, key, tok)
		freed = append(freed, key)
	}
	for i := range 24 {
		key, owner := fmt.Sprintf("bk/%d", i), ""
		if i%2 == 0 {
			owner = fmt.Sprintf("owner-%d", i)
		}
		tok := take(key, owner)
		if i%3 == 2 {
			release(key, tok)
		} else {
			held = append(held, backupLock{key, owner, tok})
		}
	}
	for shard := uint64(1); shard <= 4; shard++ {
		key := keyOfShard(t, "bk/last/", shard, 4)
		release(key, take(key, ""))
	}
	if len(maxToken) != 4 {
		t.Fatalf("tokens of %d shards, want 4", len(maxToken))
	}
	return held, freed, maxToken
}

// rideOut bounds the leadership changes takeKey and releaseKey wait out.
const rideOut = 15 * time.Second

// takeKey acquires the free key (with owner, unless "") through c and
// returns its token. It rides out a leadership change, which a loaded
// machine makes now and then in a cluster: after an ERR unavailable or a
// MOVED it waits until c's node answers for key again (it leads again
// soon: the tests' leaders are first in priority) and retries, unless the
// acquire was granted after all (nothing else takes the tests' keys).
func takeKey(t *testing.T, c *harness.Conn, key, owner string) uint64 {
	t.Helper()
	line := fmt.Sprintf("A %s 600000 0", key)
	if owner != "" {
		line += " " + owner
	}
	grant := regexp.MustCompile(grantPattern(key))
	deadline := time.Now().Add(rideOut)
	for {
		got := c.Do(t, line)
		if m := grant.FindStringSubmatch(got); m != nil {
			return parseU64(t, m[1])
		}
		if !leaderless(got) || time.Now().After(deadline) {
			t.Fatalf("%q: %q", line, got)
		}
		if tok := settledToken(t, c, key, deadline); tok != 0 {
			return tok
		}
	}
}

// releaseKey releases key's grant tok through c, riding out a leadership
// change as takeKey does.
func releaseKey(t *testing.T, c *harness.Conn, key string, tok uint64) {
	t.Helper()
	line := fmt.Sprintf("R %s %d", key, tok)
	deadline := time.Now().Add(rideOut)
	for {
		got := c.Do(t, line)
		if got == "R "+key+" OK" {
			return
		}
		if !leaderless(got) || time.Now().After(deadline) {
			t.Fatalf("%q: %q", line, got)
		}
		if settledToken(t, c, key, deadline) == 0 {
			return
		}
	}
}

// leaderless reports whether answer says its node does not lead now.
func leaderless(answer string) bool {
	f := strings.Fields(answer)
	return len(f) >= 3 && (f[2] == "MOVED" || (len(f) >= 4 && f[2] == "ERR" && f[3] == "unavailable"))
}

// settledToken queries key through c until c's node answers for it, and
// returns the token that holds it, 0 if it is free.
func settledToken(t *testing.T, c *harness.Conn, key string, deadline time.Time) uint64 {
	t.Helper()
	held := regexp.MustCompile(`^Q ` + regexp.QuoteMeta(key) + ` HELD ([1-9][0-9]*) `)
	for {
		got := c.Do(t, "Q "+key)
		if got == "Q "+key+" FREE" {
			return 0
		}
		if m := held.FindStringSubmatch(got); m != nil {
			return parseU64(t, m[1])
		}
		if !leaderless(got) || time.Now().After(deadline) {
			t.Fatalf("Q %s: %q", key, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keyOfShard is the first key prefix+N of shard (of shards).
func keyOfShard(t *testing.T, prefix string, shard uint64, shards int) string {
	t.Helper()
	for i := range 1000 {
		if k := fmt.Sprintf("%s%d", prefix, i); engine.ShardOf([]byte(k), shards) == shard {
			return k
		}
	}
	t.Fatalf("no key %sN of shard %d of %d", prefix, shard, shards)
	return ""
}

// grantCycles acquires and releases each key on c, which must reach the
// leader of every key, checks that every token is above floor and of
// restore epoch epoch, and returns the highest.
func grantCycles(t *testing.T, c *harness.Conn, floor uint64, epoch uint8, keys ...string) uint64 {
	t.Helper()
	top := uint64(0)
	for _, key := range keys {
		tok := takeKey(t, c, key, "")
		if tok <= floor || sm.TokenEpoch(tok) != epoch {
			t.Fatalf("%s: token %d (epoch %d), want one above %d (epoch %d) of epoch %d",
				key, tok, sm.TokenEpoch(tok), floor, sm.TokenEpoch(floor), epoch)
		}
		releaseKey(t, c, key, tok)
		top = max(top, tok)
	}
	return top
}

// numbered is prefix+i for i < n (24 of them reach every shard of 4 for
// each prefix used here).
func numbered(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return keys
}

// takeBackup GETs /backup of n into a file and returns its path.
func takeBackup(t *testing.T, n *harness.Node) string {
	t.Helper()
	code, body := httpGet(t, n, "/backup")
	if code != http.StatusOK {
		t.Fatalf("GET /backup: %d %q", code, body)
	}
	path := filepath.Join(t.TempDir(), "baton.backup")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// expectRestored checks, on the leader of a restored cluster, that every
// held lock is held with its token and owner, and that every freed key is
// free.
func expectRestored(t *testing.T, c *harness.Conn, held []backupLock, freed []string) {
	t.Helper()
	for _, l := range held {
		want := `^Q ` + regexp.QuoteMeta(l.key) + ` HELD ` + fmt.Sprint(l.token) + ` [0-9]+$`
		if l.owner != "" {
			want = `^Q ` + regexp.QuoteMeta(l.key) + ` HELD ` + fmt.Sprint(l.token) + ` [0-9]+ ` + regexp.QuoteMeta(l.owner) + `$`
		}
		match(t, c.Do(t, "Q "+l.key), want)
	}
	for _, k := range freed {
		queryFree(t, c, k)
	}
}

// TestBackupRestore: a backup of a three-node cluster's leader holding
// locks starts a new three-node cluster (every node with --restore FILE)
// in which every lock is held with its token and owner, every freed key is
// free, and every new grant's token is above every token the old cluster
// issued, the ones after the backup too (in restore epoch 1); every
// replica holds the table, and --restore into the data dir of a node that
// has run is refused.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	old := harness.StartCluster(t, bin, 3, harness.Options{Shards: 4, HTTP: true})
	waitLeads(t, old, old[0], 15*time.Second)
	oc := harness.Dial(t, old[0].ClientAddr)
	held, freed, maxToken := oldLocks(t, oc)
	file := takeBackup(t, old[0])
	// Grants the backup never saw.
	top := grantCycles(t, oc, 0, 0, numbered("bk/after/", 24)...)
	for _, tok := range maxToken {
		top = max(top, tok)
	}
	// The new cluster needs nothing of the old one.
	for _, n := range old {
		if code, err := n.Stop(); err != nil || code != 0 {
			t.Fatalf("stop node %d: exit %d, %v", n.ID, code, err)
		}
	}

	nodes := harness.StartCluster(t, bin, 3, harness.Options{Shards: 4, HTTP: true, Args: []string{"--restore", file}})
	for _, n := range nodes {
		eventuallyHolds(t, n, len(held))
	}
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	c := harness.Dial(t, nodes[0].ClientAddr)
	expectRestored(t, c, held, freed)

	// An owner's retry gets its own grant back; a new grant, of a freed
	// key, of a key the old cluster granted after the backup, or of a new
	// one, gets a token above every token of the old cluster.
	for _, l := range held {
		if l.owner != "" {
			do(t, c, fmt.Sprintf("A %s 600000 0 %s", l.key, l.owner), fmt.Sprintf("A %s OK %d", l.key, l.token))
			break
		}
	}
	keys := slices.Clone(freed)
	for shard := uint64(1); shard <= 4; shard++ {
		keys = append(keys, keyOfShard(t, "bk/new/", shard, 4))
	}
	for _, k := range keys {
		tok := takeKey(t, c, k, "")
		if tok <= top || sm.TokenEpoch(tok) != 1 {
			t.Fatalf("%s: token %d (epoch %d), not above %d, the old cluster's highest, in epoch 1", k, tok, sm.TokenEpoch(tok), top)
		}
	}
	grantCycles(t, c, top, 1, numbered("bk/after/", 24)...)

	// A node that has run is not restored again; without --restore it
	// starts as it was.
	n := nodes[2]
	if code, err := n.Stop(); err != nil || code != 0 {
		t.Fatalf("stop node 3: exit %d, %v", code, err)
	}
	expectRefusal(t, harness.Run(t, bin, "", 30*time.Second, n.Args...), "has a cluster already")
	n.Args = slices.DeleteFunc(n.Args, func(a string) bool { return a == "--restore" || a == file })
	n.Start()
	eventuallyHolds(t, n, len(held)+len(keys))
}

// TestRestoreTwiceInARow: node A backed up, A grants on; node B restored
// from A's backup, B grants, B backed up, B grants on; node C restored
// from B's backup. Every token of B is above every token of A, and every
// token of C above every token of B, the ones their backups never saw
// included, key by key: B's tokens are of restore epoch 1, C's of 2. The
// locks A held at its backup are held in C with their tokens.
func TestRestoreTwiceInARow(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	start := func(args ...string) (*harness.Node, *harness.Conn) {
		n := harness.StartNode(t, bin, harness.Options{Shards: 4, HTTP: true, Args: args})
		return n, harness.Dial(t, n.ClientAddr)
	}

	a, ca := start()
	held, freed, _ := oldLocks(t, ca)
	fileA := takeBackup(t, a)
	topA := grantCycles(t, ca, 0, 0, numbered("after-a/", 24)...)

	// A keeps running and granting: B stays above it however far it goes
	// (within 2^46 grants a shard).
	b, cb := start("--restore", fileA)
	expectRestored(t, cb, held, freed)
	topB := grantCycles(t, cb, topA, 1, numbered("after-a/", 24)...)
	fileB := takeBackup(t, b)
	topA = max(topA, grantCycles(t, ca, 0, 0, numbered("after-b/", 24)...))
	topB = max(topB, grantCycles(t, cb, topA, 1, numbered("after-b/", 24)...))

	_, cc := start("--restore", fileB)
	expectRestored(t, cc, held, freed)
	grantCycles(t, cc, topB, 2, numbered("after-a/", 24)...)
	grantCycles(t, cc, topB, 2, numbered("after-b/", 24)...)
	grantCycles(t, cc, topB, 2, freed...)
}

// TestRestoreMajorityLost: a three-node cluster loses two nodes for good
// (SIGKILL), the survivor having missed the last grants (its Raft links
// were cut while the other two committed them). The survivor, without a
// quorum, still serves /backup from its own table, and a cluster restored
// from that backup issues tokens above every token the old cluster
// issued, the ones the survivor never applied included.
func TestRestoreMajorityLost(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	links := harness.NewLinks()
	old := harness.StartCluster(t, bin, 3, harness.Options{Shards: 4, HTTP: true, Links: links})
	waitLeads(t, old, old[0], 15*time.Second)
	oc := harness.Dial(t, old[0].ClientAddr)
	held, freed, _ := oldLocks(t, oc)
	survivor := old[2]
	eventuallyHolds(t, survivor, len(held))

	links.Isolate(survivor.ID)
	top := grantCycles(t, oc, 0, 0, numbered("lost/", 24)...)
	// A last grant held, so that /status can show the survivor missed it.
	top = max(top, takeKey(t, oc, "lost/held", ""))
	old[0].Kill()
	old[1].Kill()
	links.Heal()

	file := takeBackup(t, survivor)
	if got := getStatus(t, survivor).Held; got != int64(len(held)) {
		t.Fatalf("the survivor holds %d locks, want %d: it applied grants made while it was cut off", got, len(held))
	}
	n := harness.StartNode(t, bin, harness.Options{Shards: 4, HTTP: true, Args: []string{"--restore", file}})
	c := harness.Dial(t, n.ClientAddr)
	expectRestored(t, c, held, freed)
	grantCycles(t, c, top, 1, numbered("lost/", 24)...)
	grantCycles(t, c, top, 1, "lost/held")
	grantCycles(t, c, top, 1, freed...)
}

// eventuallyHolds waits until n's /status says it holds want locks (its
// replicas' tables: followers too).
func eventuallyHolds(t *testing.T, n *harness.Node, want int) {
	t.Helper()
	var held int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if held = getStatus(t, n).Held; held == int64(want) {
			return
		}
	}
	t.Fatalf("node %d holds %d locks, want %d", n.ID, held, want)
}

// TestRestoreRefusals: batond --restore refuses, in one line and before it
// writes a settings file, a damaged or cut backup, a missing file and a
// --shards other than the backup's; with --shards 0 it takes the backup's.
func TestRestoreRefusals(t *testing.T) {
	t.Parallel()
	bin := harness.Bin(t)
	src := harness.StartNode(t, bin, harness.Options{Shards: 4, HTTP: true})
	held, freed, _ := oldLocks(t, harness.Dial(t, src.ClientAddr))
	file := takeBackup(t, src)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	damaged, cut := filepath.Join(dir, "damaged"), filepath.Join(dir, "cut")
	d := slices.Clone(data)
	d[len(d)/2] ^= 0x20
	if err := os.WriteFile(damaged, d, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, data[:len(data)-7], 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		args  []string
		words []string
	}{
		{"damaged", []string{"--restore", damaged}, []string{"bad backup", "bad snapshot"}},
		{"cut", []string{"--restore", cut}, []string{"truncated"}},
		{"missing", []string{"--restore", filepath.Join(dir, "none")}, []string{"no such file"}},
		{"other shard count", []string{"--restore", file, "--shards", "2"}, []string{"backup of 4 shards"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := append(singleNodeArgs(t, data), tc.args...)
			expectRefusal(t, harness.Run(t, bin, "", 30*time.Second, args...), tc.words...)
			if _, err := os.Stat(filepath.Join(data, "baton.json")); !os.IsNotExist(err) {
				t.Fatalf("a refused restore left a settings file (%v)", err)
			}
		})
	}

	// Into the data dir of a node that has run: refused, and harmless.
	if code, err := src.Stop(); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}
	args := append(slices.Clone(src.Args), "--restore", file)
	expectRefusal(t, harness.Run(t, bin, "", 30*time.Second, args...), "has a cluster already")
	src.Start()
	expectRestored(t, harness.Dial(t, src.ClientAddr), held, freed)

	// --shards 0 (no --shards) takes the backup's 4.
	addrs := harness.FreeAddrs(t, 2)
	n := harness.NewNode(t, bin, t.TempDir(), addrs[1], "--id", "1", "--peers", addrs[0]+"/"+addrs[1],
		"--data", filepath.Join(t.TempDir(), "data"), "--restore", file)
	n.Start()
	expectRestored(t, harness.Dial(t, n.ClientAddr), held, freed)
}

func TestRestoreHelp(t *testing.T) {
	t.Parallel()
	res := harness.Run(t, harness.Bin(t), "", 10*time.Second, "--help")
	for _, w := range []string{"--restore FILE", "/backup", "baton backup"} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("--help does not mention %s", w)
		}
	}
}
