package durable

import (
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

// A zeroed file and the directories made for it survive a power loss.
func TestCreateZeroedAndMkdirAllSurvivePowerLoss(t *testing.T) {
	fs := vfs.NewStrictMem()
	if err := MkdirAll(fs, "/a/b/c"); err != nil {
		t.Fatal(err)
	}
	f, err := CreateZeroed(fs, "/a/b/c/f", 3<<20+5)
	if err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(fs, "/a/b/c"); err != nil {
		t.Fatal(err)
	}
	// Writes start at offset 0 and do not truncate.
	if _, err := f.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fs.ResetToSyncedState()
	info, err := fs.Stat("/a/b/c/f")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != 3<<20+5 {
		t.Fatalf("size %d after the power loss", info.Size())
	}
	r, err := fs.Open("/a/b/c/f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 4)
	if _, err := r.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if string(buf) != "abc\x00" {
		t.Fatalf("file starts with %q", buf)
	}
}
