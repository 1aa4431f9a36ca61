package client

import (
	"context"
	"errors"
	"fmt"
	"sort"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// OffsetTimestamp looks up the first offset whose record timestamp is at
// least the given one (ListOffsets with a timestamp).
const OffsetTimestamp = storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP

// ListOffsets looks up an offset of each partition with one request per
// leader: the earliest, the latest (high watermark) or, with
// OffsetTimestamp, the first offset whose timestamp is at least
// timestampMs (-1 when no record is that recent, as Kafka answers).
// Leadership errors are retried with backoff until ctx's deadline or
// Config.RequestTimeout. The map holds every partition that succeeded; the
// error, if any, names each partition that did not.
func (c *Client) ListOffsets(ctx context.Context, spec OffsetSpec, timestampMs int64, tps ...TopicPartition) (map[TopicPartition]int64, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	out := make(map[TopicPartition]int64, len(tps))
	failed := map[TopicPartition]error{}
	pending := map[TopicPartition]error{}
	for _, tp := range tps {
		pending[tp] = nil
	}
	var b backoff
	for len(pending) > 0 {
		c.listOffsetsPass(ctx, spec, timestampMs, pending, out, failed)
		if len(pending) == 0 || !b.wait(ctx) {
			break
		}
	}
	for tp, err := range pending {
		if err == nil {
			err = ctx.Err()
		}
		failed[tp] = timedOut(fmt.Sprintf("offset of %s-%d not available", tp.Topic, tp.Partition), err)
	}
	return out, partitionErrors(failed)
}

// listOffsetsPass makes one attempt at every pending partition. A success
// moves the partition to out, a final error to failed; a retriable one
// stays pending with its error.
func (c *Client) listOffsetsPass(ctx context.Context, spec OffsetSpec, timestampMs int64, pending map[TopicPartition]error, out map[TopicPartition]int64, failed map[TopicPartition]error) {
	// An error caused by the end of ctx says less than the one it
	// replaces.
	setErr := func(tp TopicPartition, err error) {
		if ctx.Err() == nil || pending[tp] == nil {
			pending[tp] = err
		}
	}
	topics := map[string]bool{}
	for tp := range pending {
		topics[tp.Topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	md, err := c.Metadata(ctx, names...)
	if err != nil {
		for tp := range pending {
			setErr(tp, err)
		}
		if !errs.IsRetriable(err) {
			for tp := range pending {
				failed[tp] = err
				delete(pending, tp)
			}
		}
		return
	}
	addrs := map[int32]string{}
	for _, b := range md.GetBrokers() {
		if len(b.GetEndpoints()) > 0 {
			addrs[b.GetId()] = joinHostPort(b.GetEndpoints()[0].GetHost(), b.GetEndpoints()[0].GetPort())
		}
	}
	byLeader := map[string][]*storagev1.ListOffsetsPartition{}
	for _, ti := range md.GetTopics() {
		for tp := range pending {
			if tp.Topic != ti.GetName() {
				continue
			}
			if e := errs.FromProto(ti.GetError()); e != nil {
				// Metadata's word that a topic is absent is final,
				// unless this client has just created it: the node
				// that answered has not caught up yet.
				setErr(tp, e)
				if !c.retryTopicMetadata(tp.Topic, e) {
					failed[tp] = e
					delete(pending, tp)
				}
				continue
			}
			if tp.Partition < 0 || int(tp.Partition) >= len(ti.GetPartitions()) {
				failed[tp] = errs.New(errs.UnknownTopicOrPartition, "topic %q has %d partitions; partition %d does not exist", tp.Topic, len(ti.GetPartitions()), tp.Partition)
				delete(pending, tp)
				continue
			}
			addr := addrs[ti.GetPartitions()[tp.Partition].GetLeaderId()]
			if addr == "" {
				setErr(tp, errs.New(errs.LeaderNotAvailable, "%s-%d has no leader at the moment", tp.Topic, tp.Partition))
				continue
			}
			byLeader[addr] = append(byLeader[addr], &storagev1.ListOffsetsPartition{Topic: tp.Topic, Partition: tp.Partition, Spec: spec, TimestampMs: timestampMs})
		}
	}
	for addr, parts := range byLeader {
		resp, err := c.listOffsetsAt(ctx, addr, parts)
		if err != nil {
			for _, p := range parts {
				tp := TopicPartition{p.GetTopic(), p.GetPartition()}
				setErr(tp, err)
				if !errs.IsRetriable(err) {
					failed[tp] = err
					delete(pending, tp)
				}
			}
			continue
		}
		for _, r := range resp.GetResults() {
			tp := TopicPartition{r.GetTopic(), r.GetPartition()}
			if _, ok := pending[tp]; !ok {
				continue
			}
			if e := errs.FromProto(r.GetError()); e != nil {
				setErr(tp, e)
				if !e.Retriable() {
					failed[tp] = e
					delete(pending, tp)
				}
				continue
			}
			out[tp] = r.GetOffset()
			delete(pending, tp)
		}
	}
}

func (c *Client) listOffsetsAt(ctx context.Context, addr string, parts []*storagev1.ListOffsetsPartition) (*storagev1.ListOffsetsResponse, error) {
	conn, err := c.readyConn(ctx, addr)
	if err != nil {
		return nil, err
	}
	resp, err := storagev1.NewStorageServiceClient(conn).ListOffsets(ctx, &storagev1.ListOffsetsRequest{Partitions: parts})
	if err != nil {
		return nil, fmt.Errorf("list offsets at %s: %w", addr, err)
	}
	return resp, nil
}

// partitionErrors joins per-partition errors into one, in partition order,
// each prefixed with its partition; nil if there are none.
func partitionErrors(m map[TopicPartition]error) error {
	if len(m) == 0 {
		return nil
	}
	tps := make([]TopicPartition, 0, len(m))
	for tp := range m {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool { return lessTP(tps[i], tps[j]) })
	list := make([]error, 0, len(tps))
	for _, tp := range tps {
		list = append(list, fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, m[tp]))
	}
	return errors.Join(list...)
}

// lessTP orders partitions by topic, then index.
func lessTP(a, b TopicPartition) bool {
	if a.Topic != b.Topic {
		return a.Topic < b.Topic
	}
	return a.Partition < b.Partition
}
