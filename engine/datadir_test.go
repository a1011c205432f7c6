package engine

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The settings file is only durable once its directory is synced after the
// rename: a power loss could otherwise leave raft/ without baton.json, and
// a restart without --shards would route keys to other shards.
func TestSettingsFileDirectorySynced(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	var synced []string
	orig := syncDir
	syncDir = func(d string) error {
		synced = append(synced, d)
		if d == dir {
			if _, err := os.Stat(filepath.Join(dir, settingsFile)); err != nil {
				t.Errorf("%s synced before the settings file was in place: %v", d, err)
			}
		}
		return orig(d)
	}
	t.Cleanup(func() { syncDir = orig })

	cfg := Config{ID: 1, Peers: []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}, DataDir: dir}
	d, err := openDataDir(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.close()
	want := map[string]bool{root: false, dir: false}
	for _, s := range synced {
		if _, ok := want[s]; ok {
			want[s] = true
		}
	}
	for d, ok := range want {
		if !ok {
			t.Errorf("%s was never synced (synced: %q)", d, synced)
		}
	}
}

// The Raft log store is fixed when a data dir is created: a new one gets
// DefaultRaftLog (or the one asked for), a data dir from before the store
// was recorded has dragonboat's, and asking for another one is refused; so
// is a data dir made with baton's pebble store, which batond no longer has
// (TestRaftLogDroppedRefused).
func TestRaftLogSetting(t *testing.T) {
	peers := []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}
	open := func(dir, raftLog string) (string, error) {
		cfg := Config{ID: 1, Peers: peers, DataDir: dir, RaftLog: raftLog}
		d, err := openDataDir(&cfg)
		if err != nil {
			return "", err
		}
		d.close()
		return cfg.RaftLog, nil
	}
	for _, tc := range []struct {
		name     string
		settings string // an existing baton.json; "" for a new data dir
		ask      string
		want     string // "" when refused
	}{
		{"new dir, default", "", "", DefaultRaftLog},
		{"new dir, dragonboat asked for", "", RaftLogDragonboat, RaftLogDragonboat},
		{"dir from before the setting", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"]}`, "", RaftLogDragonboat},
		{"dir from before, seglog asked for", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"]}`, RaftLogSeglog, ""},
		{"new dir, seglog asked for", "", RaftLogSeglog, RaftLogSeglog},
		{"seglog dir, nothing asked for", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"],"raft_log":"seglog"}`, "", RaftLogSeglog},
		{"seglog dir, dragonboat asked for", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"],"raft_log":"seglog"}`, RaftLogDragonboat, ""},
		{"dragonboat dir, seglog asked for", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"],"raft_log":"dragonboat"}`, RaftLogSeglog, ""},
		{"baton dir, nothing asked for", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"],"raft_log":"baton"}`, "", ""},
		{"baton dir, seglog asked for", `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"],"raft_log":"baton"}`, RaftLogSeglog, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tc.settings != "" {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, settingsFile), []byte(tc.settings), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := open(dir, tc.ask)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "--raft-log") {
					t.Fatalf("opened with %q (err %v), want a refusal naming --raft-log", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("raft log %q, %v; want %q", got, err, tc.want)
			}
			if again, err := open(dir, ""); err != nil || again != tc.want {
				t.Fatalf("reopened: %q, %v; want %q kept", again, err, tc.want)
			}
		})
	}
}

// A data dir made with baton's pebble store (--raft-log baton, dropped) is
// refused at start whatever --raft-log asks, with one line that says how to
// keep its locks, and before anything in it changes: an older batond can
// still open it and take the backup.
func TestRaftLogDroppedRefused(t *testing.T) {
	peers := []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}
	const made = `{"version":1,"shards":4,"id":1,"peers":["127.0.0.1:1/127.0.0.1:2"],"raft_log":"baton"}`
	for _, ask := range []string{"", RaftLogSeglog, RaftLogDragonboat} {
		t.Run("asked for "+ask, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			// What the dropped store left: its log under raft/, the table.
			for _, f := range []string{settingsFile, lockFile, "raft/baton-raftlog/000001.log", "table/MANIFEST-000001"} {
				content := "data of " + f
				if f == settingsFile {
					content = made
				}
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := treeOf(t, dir)
			cfg := Config{ID: 1, Peers: peers, DataDir: dir, RaftLog: ask}
			d, err := openDataDir(&cfg)
			if err == nil {
				d.close()
				t.Fatalf("a data dir made with --raft-log baton opened with %q", cfg.RaftLog)
			}
			msg := err.Error()
			for _, w := range []string{dir, "--raft-log baton", "older batond", "baton backup", "--restore"} {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("refusal %q is more than one line", msg)
			}
			if after := treeOf(t, dir); !maps.Equal(after, before) {
				t.Errorf("the refused data dir changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

// treeOf maps every file and directory under dir to its content ("" for a
// directory).
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if e.IsDir() {
			tree[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		tree[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}
