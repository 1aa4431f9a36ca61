package vfs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-io/sluice/libs/storage/vfs"
)

// A FaultFS simulates a power loss: bytes written but not fsynced are gone
// after Crash, and injected faults fail chosen operations.
func Example() {
	dir, err := os.MkdirTemp("", "vfs-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	fs := vfs.NewFaultFS(vfs.OS, 42)
	path := filepath.Join(dir, "00000000000000000000.log")

	f, _ := fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	_, _ = f.WriteAt([]byte("synced;"), 0)
	_ = f.Sync()
	_, _ = f.WriteAt([]byte("not synced"), 7)

	fs.Inject(vfs.Fault{Op: vfs.OpSync, PathSuffix: ".log", Err: vfs.EIO, Times: 1})
	fmt.Println("sync fails with EIO:", errors.Is(f.Sync(), vfs.EIO))

	_ = fs.Crash(vfs.CrashOptions{})
	_ = f.Close()
	data, _ := vfs.ReadFile(fs, path)
	fmt.Printf("after the crash: %q\n", data)
	// Output:
	// sync fails with EIO: true
	// after the crash: "synced;"
}
