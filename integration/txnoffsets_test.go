package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// TestTxnOffsetsAcrossGroupCoordinatorKill commits a group's offsets in a
// transaction (AddOffsetsToTxn, then TxnOffsetCommit), SIGKILLs the group
// coordinator that holds them pending, and ends the transaction: the
// transaction coordinator's markers go to the storage node, which forwards
// them to the coordinator that took the offsets partition over (after
// replaying it, the pending offsets included). A commit becomes the
// group's offsets; an abort, in the next transaction across another kill,
// leaves them as they were. Two placements: group coordinators as
// processes of their own (the kill leaves the log where it is; the new
// coordinator replays it remotely), and coordinators at the partition
// leaders of three storage nodes (the kill takes the leader too; the new
// leader's coordinator replays its local replica).
func TestTxnOffsetsAcrossGroupCoordinatorKill(t *testing.T) {
	sideBySide(t)
	for _, v := range []struct {
		name string
		opts cluster.Options
	}{
		{"separate-coordinators", cluster.Options{StorageNodes: 1, GroupCoordinators: 2, ExtraArgs: gfoArgs}},
		{"at-leader", cluster.Options{StorageNodes: 3, ExtraArgs: gfoArgs}},
	} {
		t.Run(v.name, func(t *testing.T) { txnOffsetsAcrossKill(t, v.opts) })
	}
}

func txnOffsetsAcrossKill(t *testing.T, opts cluster.Options) {
	c := cluster.Start(t, opts)
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const (
		topic = "txo-in"
		group = "txo-group"
		tid   = "txo-worker"
	)
	_, err := cl.CreateTopic(ctx, topic, 2, int32(opts.StorageNodes), nil)
	require.NoError(t, err)
	tps := []client.TopicPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	_, _, err = cl.FindCoordinator(fctx, group)
	fcancel()
	require.NoError(t, err, "the first FindCoordinator creates the offsets topic")

	// committed returns the group's committed offsets as OffsetFetch
	// answers them, plain and with require_stable (the error code of the
	// first partition that is not stable, or 0).
	committed := func() (map[int32]int64, errs.Code, error) {
		_, addr, err := cl.FindCoordinator(ctx, group)
		if err != nil {
			return nil, 0, err
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, 0, err
		}
		defer conn.Close()
		gc := groupv1.NewGroupCoordinatorServiceClient(conn)
		req := &groupv1.OffsetFetchRequest{GroupId: group, MemberEpoch: -1}
		for _, tp := range tps {
			req.Partitions = append(req.Partitions, &commonv1.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		plain, err := gc.OffsetFetch(cctx, req)
		if err == nil && plain.GetError() != nil {
			err = errs.FromProto(plain.GetError())
		}
		if err != nil {
			return nil, 0, err
		}
		out := map[int32]int64{}
		for _, p := range plain.GetPartitions() {
			out[p.GetPartition()] = p.GetOffset()
		}
		req.RequireStable = true
		stable, err := gc.OffsetFetch(cctx, req)
		if err == nil && stable.GetError() != nil {
			err = errs.FromProto(stable.GetError())
		}
		if err != nil {
			return nil, 0, err
		}
		for _, p := range stable.GetPartitions() {
			if e := errs.FromProto(p.GetError()); e != nil {
				return out, e.Code, nil
			}
		}
		return out, 0, nil
	}
	awaitOffsets := func(what string, want map[int32]int64, killed time.Time) {
		t.Helper()
		gfoAwait(t, 90*time.Second, what, func() (bool, string) {
			got, unstable, err := committed()
			if err != nil {
				return false, err.Error()
			}
			if unstable != 0 {
				return false, fmt.Sprintf("offsets %v, require_stable answers %v", got, unstable)
			}
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("offsets %v", got)
		})
		t.Logf("%s %v after the kill", what, time.Since(killed).Round(time.Millisecond))
	}
	killCoordinator := func() int32 {
		t.Helper()
		id, _, err := cl.FindCoordinator(ctx, group)
		require.NoError(t, err)
		p := nodeByID(c, id)
		require.NotNil(t, p, "coordinator %d is no process of the cluster", id)
		require.NoError(t, p.Kill())
		t.Logf("killed group coordinator %d", id)
		return id
	}

	pid, epoch, err := cl.InitProducerID(ctx, tid, time.Minute, -1, -1)
	require.NoError(t, err)

	// Transaction 1: the offsets stay pending across the kill, then commit.
	require.NoError(t, cl.AddOffsetsToTxn(ctx, tid, pid, epoch, group))
	require.NoError(t, cl.TxnOffsetCommit(ctx, client.TxnOffsetCommitRequest{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch,
		GroupID: group, GenerationID: -1, Offsets: map[client.TopicPartition]int64{tps[0]: 5, tps[1]: 7}}))
	got, unstable, err := committed()
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: -1, 1: -1}, got, "pending offsets are not visible")
	require.Equal(t, errs.UnstableOffsetCommit, unstable)

	first := killCoordinator()
	killed := time.Now()
	_, epoch, err = cl.EndTxn(ctx, tid, pid, epoch, true)
	require.NoError(t, err)
	awaitOffsets("the committed transaction's offsets on the new coordinator", map[int32]int64{0: 5, 1: 7}, killed)
	gfoRestart(t, ctx, nodeByID(c, first))
	gfoAwait(t, 90*time.Second, "every replica of the offsets topic back in sync", func() (bool, string) {
		return gfoFullyReplicated(ctx, cl, gfoOffsetsTopic)
	})

	// Transaction 2: pending offsets across another kill, then an abort.
	require.NoError(t, cl.AddOffsetsToTxn(ctx, tid, pid, epoch, group))
	require.NoError(t, cl.TxnOffsetCommit(ctx, client.TxnOffsetCommitRequest{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch,
		GroupID: group, GenerationID: -1, Offsets: map[client.TopicPartition]int64{tps[0]: 9, tps[1]: 9}}))
	_, unstable, err = committed()
	require.NoError(t, err)
	require.Equal(t, errs.UnstableOffsetCommit, unstable)
	killCoordinator()
	killed = time.Now()
	_, _, err = cl.EndTxn(ctx, tid, pid, epoch, false)
	require.NoError(t, err)
	awaitOffsets("the offsets unchanged after the aborted transaction", map[int32]int64{0: 5, 1: 7}, killed)
}
