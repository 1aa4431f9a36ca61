package storagenode

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/naming"
)

// kafkaDescribeProducers serves DescribeProducers (key 61): the producer
// state of partitions this node leads, as the gRPC DescribeProducers.
func (r *StorageNode) kafkaDescribeProducers(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.DescribeProducersRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("describe producers: unexpected message %T", kr.Msg)
	}
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	resp.Version = req.Version
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = p
			var out *storagev1.DescribeProducersResponse
			err := naming.ValidateTopic(t.Topic)
			if err != nil {
				err = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist: %v", t.Topic, err)
			} else {
				out, err = r.DescribeProducers(ctx, &storagev1.DescribeProducersRequest{Partitions: []*commonv1.TopicPartition{{Topic: t.Topic, Partition: p}}})
			}
			if err == nil {
				res := out.GetResults()[0]
				if res.GetError() != nil {
					rp.ErrorCode, rp.ErrorMessage = itemCode(res.GetError())
				}
				for _, ps := range res.GetProducers() {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = ps.GetProducerId(), ps.GetProducerEpoch(), ps.GetLastSequence()
					ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = ps.GetLastTimestampMs(), ps.GetCoordinatorEpoch(), ps.GetCurrentTxnStartOffset()
					rp.ActiveProducers = append(rp.ActiveProducers, ap)
				}
			} else {
				rp.ErrorCode, rp.ErrorMessage = kafka.ErrorCode(err), kafka.ErrorMessage(err)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return kafka.Now(resp), nil
}

// kafkaDescribeLogDirs serves DescribeLogDirs (key 35): this node's one log
// directory with the size of every replica in it (leaders and followers),
// and from v4 the file system's total and usable bytes. A request naming
// topics gets only those; asking for none (null) gets all.
func (r *StorageNode) kafkaDescribeLogDirs(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.DescribeLogDirsRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("describe log dirs: unexpected message %T", kr.Msg)
	}
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	resp.Version = req.Version
	// Describe on the cluster (Kafka); v3+ says so in the error code,
	// older versions get no directory.
	if err := authz.Check(ctx, r.deps.Authorizer(), authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode = kafka.ErrorCode(err)
		return kafka.Now(resp), nil
	}
	var want map[string]map[int32]bool
	if req.Topics != nil {
		want = map[string]map[int32]bool{}
		for _, t := range req.Topics {
			if want[t.Topic] == nil {
				want[t.Topic] = map[int32]bool{}
			}
			for _, p := range t.Partitions {
				want[t.Topic][p] = true
			}
		}
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = filepath.Join(r.deps.Node.DataDir, "logs")
	byTopic := map[string][]kmsg.DescribeLogDirsResponseDirTopicPartition{}
	for _, part := range r.replicas.Partitions() {
		tp := part.TP()
		if want != nil && !want[tp.Topic][tp.Partition] {
			continue
		}
		v := part.View()
		rp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
		rp.Partition, rp.Size = tp.Partition, part.Log().Size()
		// Kafka's lag of a current (not future) replica: how far its log
		// end is below the high watermark it knows.
		rp.OffsetLag = max(v.HighWatermark-v.LogEnd, 0)
		byTopic[tp.Topic] = append(byTopic[tp.Topic], rp)
	}
	names := make([]string, 0, len(byTopic))
	for n := range byTopic {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic, dt.Partitions = n, byTopic[n]
		sort.Slice(dt.Partitions, func(i, j int) bool { return dt.Partitions[i].Partition < dt.Partitions[j].Partition })
		dir.Topics = append(dir.Topics, dt)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir.Dir, &st); err == nil {
		dir.TotalBytes, dir.UsableBytes = int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	} else {
		// -1 is Kafka's "unknown" for both.
		r.logger.Warn("cannot read the log directory's file system size", log.Err(err))
		dir.TotalBytes, dir.UsableBytes = -1, -1
	}
	resp.Dirs = append(resp.Dirs, dir)
	return kafka.Now(resp), nil
}
