package engine

import (
	"os"
	"path/filepath"
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
