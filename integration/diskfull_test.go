//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/testutil"
)

// A storage node whose data directory is a real 64 MiB file system (a
// tmpfs) fills it. With the free-space reserve, produce is refused with a
// clear, retriable error and the partition stays online; DeleteRecords frees
// space and produce works again. Without a reserve the write itself hits
// ENOSPC and the replica goes offline with an ERROR naming the cause; once a
// filler file is removed it comes back by itself, without a restart. In both
// cases every acknowledged record is read back.
func TestDiskFull(t *testing.T) {
	t.Run("reserve refuses appends", func(t *testing.T) {
		d := startOnSmallDisk(t, 16<<20)
		acked := d.fill(t)
		last := d.lastErr
		require.Equal(t, errs.StorageError, errs.CodeOf(last), "%v", last)
		require.True(t, errs.IsRetriable(last))
		require.Contains(t, last.Error(), "below the reserve of 16.0 MiB (storage.disk-reserve-bytes)")
		require.False(t, d.logged(t, "log offline after I/O error"), "the reserve keeps the replica online")

		d.requireReadBack(t, acked, 0)
		// DeleteRecords still works (it needs room for a checkpoint) and
		// frees the segments below the new log start.
		low := d.deleteRecords(t)
		require.Equal(t, acked.end(), low)
		d.produceUntilAccepted(t, &acked)
		d.requireReadBack(t, acked, low)
	})

	t.Run("ENOSPC takes the replica offline until space is back", func(t *testing.T) {
		d := startOnSmallDisk(t, 0)
		filler := filepath.Join(d.node.DataDir, "filler")
		require.NoError(t, os.WriteFile(filler, make([]byte, 8<<20), 0o644))
		acked := d.fill(t)
		last := d.lastErr
		require.Equal(t, errs.StorageError, errs.CodeOf(last), "%v", last)
		require.Contains(t, last.Error(), "no space left on device")
		testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			return want(d.logged(t, "log offline after I/O error"), "no ERROR about the offline replica")
		})
		line := d.logLine(t, "log offline after I/O error")
		for _, want := range []string{"level=ERROR", "tp.topic=full", "tp.partition=0", "path=", "no space left on device"} {
			require.Contains(t, line, want)
		}
		// While the disk stays full the replica stays offline.
		require.Equal(t, errs.StorageError, errs.CodeOf(d.produce(t, 1, &acked)))

		require.NoError(t, os.Remove(filler))
		start := time.Now()
		d.produceUntilAccepted(t, &acked)
		t.Logf("produce accepted again %v after the filler was removed", time.Since(start).Round(time.Millisecond))
		require.True(t, d.logged(t, "replica back online"))
		d.requireReadBack(t, acked, 0)
		low := d.deleteRecords(t)
		require.Equal(t, acked.end(), low)
		d.produceUntilAccepted(t, &acked)
		d.requireReadBack(t, acked, low)
	})
}

// A follower whose disk reaches the reserve refuses the leader's batches,
// asks again once a second instead of as fast as the leader resends, and
// leaves the ISR; DeleteRecords on the leader reaches it and frees its
// space, and it catches up and rejoins the ISR without a restart.
func TestDiskFullFollower(t *testing.T) {
	d := startSmallDiskCluster(t, 2, "storage-2", 16<<20, "--storage.replica-lag-time-max=2s")
	leaderID, followerID := d.leader.NodeID, d.node.NodeID
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		return want(len(d.isr(t)) == 2, "the follower never joined the ISR")
	})
	// acks=1 fills the leader's log; the follower copies until its disk
	// reaches the reserve.
	acked := ackedRange{values: map[int64]string{}}
	refused := "cannot append replicated batches; resyncing"
	for i := 0; !d.logged(t, refused); i++ {
		require.Less(t, i, 400, "the follower never refused")
		require.NoError(t, d.produceAcks(t, 4, &acked, storagev1.Acks_ACKS_LEADER))
	}
	require.Contains(t, d.logLine(t, refused), "storage.disk-reserve-bytes")
	before := len(d.logLines(t, refused))
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		return want(slices.Equal(d.isr(t), []int32{leaderID}), "the follower stayed in the ISR")
	})
	// About one refusal a second, not a loop as fast as the stream goes.
	time.Sleep(3 * time.Second) // a fixed window to count refusals in
	require.Less(t, len(d.logLines(t, refused))-before, 15, "the follower retries without a pause")

	low := d.deleteRecords(t)
	require.Equal(t, acked.end(), low)
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		return want(len(d.isr(t)) == 2, "the follower did not rejoin the ISR")
	})
	require.ElementsMatch(t, []int32{leaderID, followerID}, d.isr(t))
	d.produceUntilAccepted(t, &acked) // acks=all, both replicas
	d.requireReadBack(t, acked, low)
}

// smallDisk is a one-controller, one-storage-node cluster whose storage
// node keeps its data on a 64 MiB tmpfs.
type smallDisk struct {
	c       *devcluster.Cluster
	node    *devcluster.Process // the one on the small disk
	leader  *devcluster.Process
	sc      storagev1.StorageServiceClient
	cl      *client.Client
	lastErr error
	seq     int
}

// ackedRange is what the partition acknowledged: the value prefix of each
// acknowledged offset, and the offset after the last.
type ackedRange struct {
	values map[int64]string
	next   int64
}

func (a *ackedRange) end() int64 { return a.next }

func startOnSmallDisk(t *testing.T, reserve int64) *smallDisk {
	t.Helper()
	return startSmallDiskCluster(t, 1, "storage-1", reserve)
}

// startSmallDiskCluster starts one controller and nodes storage nodes, the
// one named small on a 64 MiB tmpfs, and creates topic "full" with one
// partition on every storage node, storage-1 first (the leader).
func startSmallDiskCluster(t *testing.T, nodes int, small string, reserve int64, extraArgs ...string) *smallDisk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a 64 MiB tmpfs needs root (CAP_SYS_ADMIN); skipped")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, small) // the storage node's data directory
	require.NoError(t, os.MkdirAll(data, 0o755))
	if err := syscall.Mount("tmpfs", data, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a 64 MiB tmpfs at %s (%v): mounting is not permitted here; skipped", data, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(data, syscall.MNT_DETACH) }) // the test directory goes next anyway
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Spec{
		Sluiced: cluster.Sluiced(t), Dir: dir, Controllers: 1, StorageNodes: nodes,
		ExtraArgs: append(append(append([]string{}, cluster.DefaultArgs...), fmt.Sprintf("--storage.disk-reserve-bytes=%d", reserve)),
			extraArgs...),
		ReadyTimeout: 90 * time.Second,
	})
	require.NoError(t, err)
	d := &smallDisk{c: c, node: c.Process(small), leader: c.Process("storage-1")}
	t.Cleanup(func() {
		c.StopAll()
		if t.Failed() {
			for _, p := range c.Processes() {
				if b, err := os.ReadFile(p.LogPath); err == nil {
					t.Logf("---- %s ----\n%s", p.Name, lastLines(string(b), 60))
				}
			}
		}
	})
	d.cl = cluster.Client(t, c)
	var replicas []int32
	for _, p := range c.StorageNodes() {
		replicas = append(replicas, p.NodeID)
	}
	resp, err := d.cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: "full",
		Assignments: []*controllerv1.ReplicaAssignment{{Replicas: replicas}},
		Configs:     map[string]string{"segment.bytes": "1048576", "min.insync.replicas": "1"}}}})
	require.NoError(t, err)
	if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
		t.Fatalf("creating the topic: %v", e)
	}
	conn, err := d.cl.Conn(d.leader.Addr)
	require.NoError(t, err)
	d.sc = storagev1.NewStorageServiceClient(conn)
	// The leader may need a moment to learn it leads the new topic.
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error { return d.produce(t, 1, &ackedRange{values: map[int64]string{}}) })
	return d
}

// produce sends n records of 64 KiB with acks=all and records what was
// acknowledged.
func (d *smallDisk) produce(t *testing.T, n int, acked *ackedRange) error {
	t.Helper()
	return d.produceAcks(t, n, acked, storagev1.Acks_ACKS_ALL)
}

// produceAcks is produce with an acknowledgement level.
func (d *smallDisk) produceAcks(t *testing.T, n int, acked *ackedRange, acks storagev1.Acks) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*commonv1.Record
	var vals []string
	for range n {
		d.seq++
		v := fmt.Sprintf("record-%06d-", d.seq)
		vals = append(vals, v)
		body := append([]byte(v), bytes.Repeat([]byte{'x'}, 64<<10)...)
		recs = append(recs, &commonv1.Record{Value: body})
	}
	resp, err := d.sc.Produce(ctx, &storagev1.ProduceRequest{Acks: acks, Partitions: []*storagev1.ProducePartition{{
		Topic: "full", Data: &storagev1.ProducePartition_Records{Records: &commonv1.Records{Records: recs}}}}})
	if err == nil {
		if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
			err = e
		}
	}
	if err != nil {
		d.lastErr = err
		return err
	}
	base := resp.GetResults()[0].GetBaseOffset()
	for i, v := range vals {
		acked.values[base+int64(i)] = v
	}
	acked.next = base + int64(n)
	return nil
}

// fill produces until the partition refuses, and returns what was
// acknowledged.
func (d *smallDisk) fill(t *testing.T) ackedRange {
	t.Helper()
	acked := ackedRange{values: map[int64]string{}}
	for i := 0; ; i++ {
		require.Less(t, i, 400, "64 MiB never filled")
		if err := d.produce(t, 4, &acked); err != nil {
			return acked
		}
	}
}

// produceUntilAccepted retries one produce until it is acknowledged.
func (d *smallDisk) produceUntilAccepted(t *testing.T, acked *ackedRange) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error { return d.produce(t, 2, acked) })
}

// deleteRecords deletes every record below the high watermark and returns
// the new log start offset.
func (d *smallDisk) deleteRecords(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := d.sc.DeleteRecords(ctx, &storagev1.DeleteRecordsRequest{Partitions: []*storagev1.DeleteRecordsPartition{{Topic: "full", Offset: -1}}})
	require.NoError(t, err)
	if e := errs.FromProto(resp.GetResults()[0].GetError()); e != nil {
		t.Fatalf("DeleteRecords: %v", e)
	}
	return resp.GetResults()[0].GetLowWatermark()
}

// requireReadBack fetches from the log start and checks that every
// acknowledged record at or above from is there, in place.
func (d *smallDisk) requireReadBack(t *testing.T, acked ackedRange, from int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[int64]string{}
	// A fetch without follow answers one round; fetch again from where it
	// ended until the acknowledged end.
	for next := from; next < acked.next; {
		stream, err := d.sc.Fetch(ctx, &storagev1.FetchRequest{Format: storagev1.RecordFormat_RECORD_FORMAT_RECORDS,
			Partitions: []*storagev1.FetchPartition{{Topic: "full", FetchOffset: next}}})
		require.NoError(t, err)
		progressed := false
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if e := errs.FromProto(resp.GetError()); e != nil {
				t.Fatalf("fetch: %v", e)
			}
			for _, r := range resp.GetRecords().GetRecords() {
				v := string(r.GetValue())
				got[r.GetOffset()] = v[:min(len(v), len("record-000000-"))]
			}
			if resp.GetNextOffset() > next {
				next, progressed = resp.GetNextOffset(), true
			}
		}
		require.True(t, progressed, "fetch from %d returned nothing below the acknowledged end %d", next, acked.next)
	}
	n := 0
	for off, v := range acked.values {
		if off >= from {
			require.Equal(t, v, got[off], "acknowledged record at offset %d", off)
			n++
		}
	}
	require.Positive(t, n)
}

// logged reports whether the storage node's log has a line with msg.
func (d *smallDisk) logged(t *testing.T, msg string) bool { return d.logLine(t, msg) != "" }

// logLine returns the first line of the storage node's log with msg.
func (d *smallDisk) logLine(t *testing.T, msg string) string {
	t.Helper()
	lines := d.logLines(t, msg)
	if len(lines) == 0 {
		return ""
	}
	return lines[0]
}

// logLines returns the lines of the storage node's log with msg.
func (d *smallDisk) logLines(t *testing.T, msg string) []string {
	t.Helper()
	f, err := os.Open(d.node.LogPath)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `msg="`+msg+`"`) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// isr returns the partition's in-sync replicas as the controller has them.
func (d *smallDisk) isr(t *testing.T) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := d.cl.DescribeTopics(ctx, "full")
	require.NoError(t, err)
	return resp.GetTopics()[0].GetPartitions()[0].GetIsr()
}

// want turns a condition into an error for testutil.Eventually.
func want(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}

// lastLines returns the last lines of s.
func lastLines(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
