//go:build linux

package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/libs/client/record"
)

func TestFitLevel(t *testing.T) {
	for _, tc := range []struct {
		cached       []int64
		budget, keep int64
		want         int64
	}{
		{[]int64{100}, 40, 10, 40},
		{[]int64{100}, 5, 10, 10},           // never below keep
		{[]int64{10, 100}, 60, 5, 50},       // the small log keeps its 10
		{[]int64{30, 30, 30}, 60, 5, 20},    // even share
		{[]int64{5, 50, 100}, 65, 1, 30},    // 5 + 30 + 30
		{[]int64{100, 100}, 1000, 1, 100},   // fits: nothing to cut
		{[]int64{0, 0, 90}, 30, 10, 30},     // empty logs count for nothing
		{[]int64{20, 20, 20, 20}, 10, 8, 8}, // keep wins over the budget
		{[]int64{7, 1 << 40}, 1 << 30, 0, 1<<30 - 7},
	} {
		require.Equal(t, tc.want, fitLevel(tc.cached, tc.budget, tc.keep), "%v budget %d keep %d", tc.cached, tc.budget, tc.keep)
	}
}

// appendValues appends one batch of n records with the values value(i).
func appendValues(t *testing.T, l *Log, n int, value func(i int) []byte) {
	t.Helper()
	bld := record.NewBuilder(record.CodecNone)
	for i := 0; i < n; i++ {
		require.NoError(t, bld.AppendKV(1, nil, value(i)))
	}
	batch, err := bld.Build()
	require.NoError(t, err)
	_, err = l.AppendAsLeader(bytes.Clone(batch), 0, record.FromClient)
	require.NoError(t, err)
}

func kibValue(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 1000) }

// residentPages counts the pages of [from, to) of a file that are in the
// page cache.
func residentPages(t *testing.T, path string, from, to int64) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (int64(len(m))+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for p := from / page; p < (to+page-1)/page && p < int64(len(vec)); p++ {
		n += int(vec[p] & 1)
	}
	return n
}

// A budget drops the oldest bytes of a log from the page cache, also those
// a reader has mapped, down to the budget, flushing first what is not
// durable yet; the newest bytes stay, and every record reads back intact.
func TestPageCacheDropsOldestBytes(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the test directory is on tmpfs, whose pages cannot be dropped")
	}
	const budget, keep = 4 << 20, 1 << 20
	pc := NewPageCache(PageCacheOptions{BudgetBytes: budget, KeepBytes: keep, Interval: time.Hour})
	cfg := testConfig(t, map[string]string{"segment.bytes": "4194304", "max.message.bytes": "1048576"})
	l := openLog(t, dir, cfg, Options{PageCache: pc})
	defer l.Close()

	value := bytes.Repeat([]byte("v"), 1000)
	var want []string
	for b := 0; b < 256; b++ { // 256 batches of 64 records: about 16.5 MiB
		appendValues(t, l, 64, func(i int) []byte {
			v := append([]byte{byte(b), byte(i)}, value...)
			want = append(want, string(v))
			return v
		})
	}
	// A reader maps every page: the kernel keeps mapped pages cached.
	_, values := readAll(t, l, 0, l.LogEndOffset())
	require.Equal(t, want, values)

	type seg struct {
		path string
		size int64
	}
	var segs []seg
	var total int64
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	sort.Strings(names)
	for _, n := range names {
		fi, err := os.Stat(n)
		require.NoError(t, err)
		segs = append(segs, seg{n, fi.Size()})
		total += fi.Size()
	}
	require.Greater(t, len(segs), 3)
	require.Equal(t, total, l.cachedBytes())

	pc.Trim()
	require.Equal(t, total-budget, pc.DroppedBytes())
	require.Equal(t, int64(budget), l.cachedBytes())

	// Bytes [0, total-budget) of the log are gone from the cache but for the
	// partial pages at a drop's edges; the rest is cached.
	pos := int64(0)
	cut := total - budget
	page := int64(os.Getpagesize())
	for _, s := range segs {
		if dropped := min(max(cut-pos, 0), s.size); dropped > 0 {
			require.LessOrEqual(t, residentPages(t, s.path, 0, dropped), 2, "%s: dropped bytes still cached", s.path)
		}
		if kept := max(pos+s.size-max(cut, pos), 0); kept > 0 {
			from := s.size - kept
			require.GreaterOrEqual(t, residentPages(t, s.path, from, s.size), int(kept/page)-1, "%s: newest bytes dropped", s.path)
		}
		pos += s.size
	}

	// A second pass has nothing to drop, and everything reads back.
	pc.Trim()
	require.Equal(t, total-budget, pc.DroppedBytes())
	_, values = readAll(t, l, 0, l.LogEndOffset())
	require.Equal(t, want, values)
}

// The newest keep bytes of every log stay cached even when the logs
// together hold more than the budget.
func TestPageCacheKeepsEachLogsTail(t *testing.T) {
	const keep = 256 << 10
	pc := NewPageCache(PageCacheOptions{BudgetBytes: 1, KeepBytes: keep, Interval: time.Hour})
	cfg := testConfig(t, map[string]string{"segment.bytes": "1048576", "max.message.bytes": "1048576"})
	var logs []*Log
	for i := 0; i < 3; i++ {
		l := openLog(t, t.TempDir(), cfg, Options{PageCache: pc})
		defer l.Close()
		for b := 0; b < 4; b++ {
			appendValues(t, l, 100, kibValue)
		}
		logs = append(logs, l)
	}
	pc.Trim()
	for _, l := range logs {
		require.Equal(t, int64(keep), l.cachedBytes())
	}
}

func TestAutoPageCacheBudget(t *testing.T) {
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	require.NoError(t, os.WriteFile(meminfo, []byte("MemTotal:       24000000 kB\nMemFree:        1 kB\n"), 0o644))
	dev := func(name, id, features string) {
		d := filepath.Join(dir, "devices", name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "device"), []byte(id+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "features"), []byte(features+"\n"), 0o644))
	}
	devices := filepath.Join(dir, "devices")
	b, _ := autoPageCacheBudget(devices, meminfo)
	require.Zero(t, b, "no devices")
	dev("virtio1", "0x0002", "00100010011001") // a block device with bit 5 set: not a balloon
	dev("virtio0", "0x0005", "01100001000000") // a balloon without reporting
	b, _ = autoPageCacheBudget(devices, meminfo)
	require.Zero(t, b)
	dev("virtio0", "0x0005", "01100101000000") // reporting negotiated
	b, why := autoPageCacheBudget(devices, meminfo)
	require.Equal(t, int64(24000000<<10/4), b, why)
}

// After a truncation (a follower cut back to its new leader's log), the
// drop point and the durable point move back with the log: what is
// appended again is counted, and made durable before any of it is dropped.
func TestPageCacheAfterTruncation(t *testing.T) {
	const budget, keep = 2 << 20, 512 << 10
	pc := NewPageCache(PageCacheOptions{BudgetBytes: budget, KeepBytes: keep, Interval: time.Hour})
	cfg := testConfig(t, map[string]string{"segment.bytes": "1048576", "max.message.bytes": "1048576"})
	l := openLog(t, t.TempDir(), cfg, Options{PageCache: pc})
	defer l.Close()
	appendMiB := func(n int) {
		for b := 0; b < n*16; b++ { // batches of 64 KiB
			appendValues(t, l, 64, kibValue)
		}
	}
	appendMiB(8)
	pc.Trim()
	require.Equal(t, int64(budget), l.cachedBytes())

	require.NoError(t, l.TruncateTo(100))
	appendMiB(6)
	require.Greater(t, l.cachedBytes(), int64(budget), "bytes appended after the truncation are not counted")
	pc.Trim()
	require.Equal(t, int64(budget), l.cachedBytes())
	require.Equal(t, l.LogEndOffset(), l.durable.Load(), "bytes were dropped without being made durable first")
}
