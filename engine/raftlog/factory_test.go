package raftlog

import (
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/lni/dragonboat/v4/config"
)

func hasWAL(t *testing.T, fs vfs.FS, dir string) bool {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			return true
		}
	}
	return false
}

func TestFactoryDirectories(t *testing.T) {
	tests := []struct {
		name   string
		wals   []string
		walDir string // where the WAL must be
	}{
		{"no WAL dirs", nil, "/nh/baton-raftlog"},
		{"WAL dir is the NodeHost dir", []string{"/nh"}, "/nh/baton-raftlog"},
		{"WAL dir is the NodeHost dir, unclean", []string{"/nh/"}, "/nh/baton-raftlog"},
		{"a WAL dir of its own", []string{"/wal"}, "/wal/baton-raftlog"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			f := &Factory{fs: fs}
			cfg := config.NodeHostConfig{}
			cfg.Expert.Engine.ExecShards = 3
			ldb, err := f.Create(cfg, nil, []string{"/nh"}, tt.wals)
			if err != nil {
				t.Fatal(err)
			}
			defer ldb.Close()
			db := ldb.(*LogDB)
			if db.workers.Len() != 3 {
				t.Fatalf("%d worker contexts, want 3", db.workers.Len())
			}
			if !hasWAL(t, fs, tt.walDir) {
				t.Fatalf("no WAL in %s", tt.walDir)
			}
			if tt.walDir != "/nh/baton-raftlog" && hasWAL(t, fs, "/nh/baton-raftlog") {
				t.Fatal("a WAL in the NodeHost dir too")
			}
		})
	}
	if _, err := (&Factory{fs: vfs.NewMem()}).Create(config.NodeHostConfig{}, nil, nil, nil); err == nil {
		t.Fatal("Create without a directory: no error")
	}
}

// The options keep pebble's WAL recycling: once a WAL is obsolete (its
// memtable flushed), the next WAL reuses its file.
func TestWALsAreRecycled(t *testing.T) {
	var mu sync.Mutex
	var created []pebble.WALCreateInfo
	events := pebble.EventListener{WALCreated: func(info pebble.WALCreateInfo) {
		mu.Lock()
		defer mu.Unlock()
		created = append(created, info)
	}}
	opts := pebbleOptions(vfs.NewMem(), "", events)
	if _, archives := opts.Cleaner.(pebble.ArchiveCleaner); archives {
		t.Fatal("an archiving cleaner turns recycling off")
	}
	db, err := pebble.Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 3; i++ {
		if err := db.Set([]byte{byte(i)}, []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range created {
		if c.RecycledFileNum != 0 {
			return
		}
	}
	t.Fatalf("no WAL recycled: %+v", created)
}
