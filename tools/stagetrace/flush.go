package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// flush times the disk's flush as issue 30 defines it: write+fdatasync of
// 4 KiB into a preallocated file. Preallocated means written (zeros) and
// synced, not fallocated: an fdatasync into fallocated or new blocks must
// write the inode too, as seglog's doc explains, and baton's log never
// syncs such blocks.
func flush(args []string) error {
	fs := flag.NewFlagSet("flush", flag.ExitOnError)
	dir := fs.String("dir", os.TempDir(), "directory of the file (on the disk to measure)")
	n := fs.Int("n", 2000, "flushes")
	size := fs.Int("size", 4096, "bytes per write")
	_ = fs.Parse(args)
	d, err := timeFlushes(*dir, *n, *size)
	if err != nil {
		return err
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	fmt.Printf("flush n=%d size=%d p50_us=%.0f p90_us=%.0f\n", len(d), *size,
		percentile(d, 0.5)/1000, percentile(d, 0.9)/1000)
	return nil
}

// timeFlushes returns the time of each of n write+fdatasync calls of size
// bytes, at successive offsets of a zero-filled, synced file in dir.
func timeFlushes(dir string, n, size int) ([]int64, error) {
	f, err := os.CreateTemp(dir, "flush-*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()); _ = f.Close() }()
	zeros := make([]byte, 1<<20)
	for left := n * size; left > 0; left -= len(zeros) {
		if _, err := f.Write(zeros[:min(left, len(zeros))]); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	fd := int(f.Fd())
	d := make([]int64, 0, n)
	for i := range n {
		start := time.Now()
		if _, err := unix.Pwrite(fd, buf, int64(i*size)); err != nil {
			return nil, err
		}
		if err := unix.Fdatasync(fd); err != nil {
			return nil, err
		}
		d = append(d, int64(time.Since(start)))
	}
	return d, nil
}
