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

// syncCountingFS counts the syncs of the files it creates.
type syncCountingFS struct {
	vfs.FS
	syncs int
}

func (fs *syncCountingFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return &syncCountingFile{File: f, fs: fs}, err
}

type syncCountingFile struct {
	vfs.File
	fs *syncCountingFS
}

func (f *syncCountingFile) Sync() error {
	f.fs.syncs++
	return f.File.Sync()
}

// CreateZeroed has its zeros written back as it goes, not all at the end:
// on a file system without sync_file_range (here, in memory) that is a full
// sync every other chunk (pebble's syncing file syncs up to a chunk behind
// the last write, and a full sync then covers that chunk too).
func TestCreateZeroedWritesBackAsItGoes(t *testing.T) {
	fs := &syncCountingFS{FS: vfs.NewMem()}
	const chunks = 8
	f, err := CreateZeroed(fs, "/f", chunks*zeroFillChunk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fs.syncs < chunks/2 {
		t.Fatalf("%d syncs while zero-filling %d chunks, want one every other chunk", fs.syncs, chunks)
	}
}
