// Package durable holds the few file-system steps that baton's Raft log
// store (engine/seglog) takes to make a file or a directory survive a power loss, written against pebble's vfs.FS so that
// tests can drop unsynced writes (vfs.NewStrictMem).
package durable

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/vfs"
)

// MkdirAll creates dir and its missing parents, syncing each parent after
// creating a child in it: a directory entry that is not synced can vanish in
// a power loss, and with it everything a store synced below it.
func MkdirAll(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := fs.PathDir(dir)
	if parent != dir {
		if err := MkdirAll(fs, parent); err != nil {
			return err
		}
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if parent == dir {
		return nil
	}
	return SyncDir(fs, parent)
}

// SyncDir syncs the directory dir, so that the files created, renamed or
// removed in it stay so after a power loss.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return d.Close()
}

// zeroFillChunk is the size of CreateZeroed's writes, and how much of them
// it lets the kernel hold dirty before writing them back.
const zeroFillChunk = 1 << 20

// CreateZeroed creates the file name (replacing any file of that name),
// writes size bytes of zeros into it, syncs it and returns it open for
// writing at offset 0, without truncation (through ReuseForWrite, renaming
// it onto itself). The caller syncs the directory if the file's name must
// survive a power loss.
//
// Why: an fdatasync after a write that grows a file (or fills blocks that
// fallocate reserved) must also write the inode, and the kernel waits for
// that write before the cache flush: three device operations in turn
// instead of two. Measured on ext4 here: 3.0 device writes and 330-530 µs
// per fdatasync of a 3 KB append to a growing or fallocated file, 2.0 and
// 170-210 µs for the same write into blocks written before. A file written
// full of zeros first syncs data only from its first record on.
func CreateZeroed(fs vfs.FS, name string, size int64) (vfs.File, error) {
	raw, err := fs.Create(name)
	if err != nil {
		return nil, err
	}
	// Written back a chunk at a time while it is written (pebble's syncing
	// file: sync_file_range on ext4, a sync elsewhere), so that the
	// device's queue never holds more than a few chunks of zeros: 64 MiB
	// written and then synced at once held the fdatasyncs of other files,
	// other nodes' Raft logs among them, for up to 26-45 ms here; written
	// back a chunk at a time, for up to 2.7-7 ms (BENCHMARKS.md).
	f := vfs.NewSyncingFile(raw, vfs.SyncingFileOptions{BytesPerSync: zeroFillChunk})
	// A buffer of its own: vfs.File.Write may modify what it is given
	// (pebble's in-memory file system does, under -race), so a shared
	// one would not stay zeros.
	zeros := make([]byte, min(size, zeroFillChunk))
	for n := int64(0); n < size && err == nil; n += int64(len(zeros)) {
		_, err = f.Write(zeros[:min(int64(len(zeros)), size-n)])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("zero-fill %s: %w", name, err)
	}
	return fs.ReuseForWrite(name, name)
}
