package storagenode

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
)

// kafkaAcks converts Kafka's acks (0, 1, -1) to the gRPC enum; ok is false
// for any other value (INVALID_REQUIRED_ACKS).
func kafkaAcks(a int16) (storagev1.Acks, bool) {
	switch a {
	case 0:
		return storagev1.Acks_ACKS_NONE, true
	case 1:
		return storagev1.Acks_ACKS_LEADER, true
	case -1:
		return storagev1.Acks_ACKS_ALL, true
	}
	return storagev1.Acks_ACKS_UNSPECIFIED, false
}

// produceFromKafka converts a Kafka produce request to the gRPC request
// and the per-partition errors of items it refuses before the append path
// (index in request order; nil where the item goes on). Each partition's
// record batches are handed over as they came: the append path validates
// every record of them as it does for gRPC.
func produceFromKafka(req *kmsg.ProduceRequest) (*storagev1.ProduceRequest, []error) {
	out := &storagev1.ProduceRequest{TimeoutMs: req.TimeoutMillis}
	if req.TransactionID != nil {
		out.TransactionalId = *req.TransactionID
	}
	var reqErr error
	acks, ok := kafkaAcks(req.Acks)
	out.Acks = acks
	if !ok {
		reqErr = errs.Invalid(errs.InvalidRequiredAcks, "acks", "%d is not a valid acks value: use -1 (all), 0 or 1", req.Acks)
	}
	seen := map[string]int{}
	var items []error
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			pp := &storagev1.ProducePartition{Topic: t.Topic, Partition: p.Partition, Data: &storagev1.ProducePartition_Batches{Batches: p.Records}}
			out.Partitions = append(out.Partitions, pp)
			err := reqErr
			if err == nil {
				// The gRPC validator on a request of this one partition:
				// the same checks, answered per partition as Kafka does.
				err = validateProduce(&storagev1.ProduceRequest{Acks: out.Acks, TimeoutMs: out.TimeoutMs, Partitions: []*storagev1.ProducePartition{pp}})
			}
			key := fmt.Sprintf("%s/%d", t.Topic, p.Partition)
			if i, dup := seen[key]; dup {
				// Both occurrences are refused: which one a client
				// reads back is undefined.
				err = errs.Invalid(errs.InvalidRequest, "topics", "partition %s-%d appears more than once in the request", t.Topic, p.Partition)
				items[i] = err
			}
			seen[key] = len(items)
			items = append(items, err)
		}
	}
	return out, items
}

// kafkaProduce serves Produce (key 0). The append happens here, on the
// connection's goroutine, so the requests of one connection append in
// order (an idempotent producer pipelines up to five); only the wait for
// acks=all runs later (kafka.Reply.Wait).
func (r *StorageNode) kafkaProduce(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.ProduceRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("produce: unexpected message %T", kr.Msg)
	}
	all, items := produceFromKafka(req)
	if err := r.authorizeProduce(ctx, all); err != nil {
		// Kafka answers a refused transactional id in every partition.
		for i := range items {
			items[i] = err
		}
	}
	// Only the partitions that passed validation go to the append path;
	// their results are put back in request order.
	good := &storagev1.ProduceRequest{Acks: all.Acks, TimeoutMs: all.TimeoutMs, TransactionalId: all.TransactionalId}
	for i, pp := range all.Partitions {
		if items[i] == nil {
			good.Partitions = append(good.Partitions, pp)
		}
	}
	var results *storagev1.ProduceResponse
	var waits []pending
	var span trace.Span
	acks := acksOf(good.Acks)
	if len(good.Partitions) > 0 {
		actx, cancel := context.WithTimeout(ctx, produceTimeout(good))
		actx, span = r.requestSpan(actx, good)
		results, waits = r.appendAll(actx, good)
		cancel()
	} else {
		results, span = &storagev1.ProduceResponse{}, trace.SpanFromContext(context.Background()) // a no-op span
	}
	done := func() { span.End() }
	merged := make([]*storagev1.ProducePartitionResult, len(all.Partitions))
	next := 0
	for i, pp := range all.Partitions {
		if items[i] != nil {
			merged[i] = &storagev1.ProducePartitionResult{Topic: pp.GetTopic(), Partition: pp.GetPartition(), BaseOffset: -1, LogAppendTimeMs: -1, LogStartOffset: -1,
				Error: errs.ItemError(items[i])}
			continue
		}
		merged[i] = results.Results[next]
		next++
	}
	if req.Acks == 0 {
		done()
		// Kafka answers nothing at acks=0 and closes the connection when
		// a partition failed, so the producer refreshes its metadata
		// instead of sending to a node that is not the leader forever.
		for _, res := range merged {
			if res.GetError() != nil {
				code, _ := itemCode(res.GetError())
				return kafka.Reply{}, fmt.Errorf("acks=0 produce to %s-%d failed with Kafka error %d: closing the connection as Kafka does",
					res.GetTopic(), res.GetPartition(), code)
			}
		}
		return kafka.Reply{}, nil
	}
	if len(waits) == 0 {
		done()
		return kafka.Now(r.produceToKafka(req, merged)), nil
	}
	timeout := produceTimeout(good)
	return kafka.Reply{Wait: func(wctx context.Context) kmsg.Response {
		defer done()
		wctx, cancel := context.WithTimeout(trace.ContextWithSpan(wctx, span), timeout)
		defer cancel()
		r.awaitAll(wctx, acks, waits)
		return r.produceToKafka(req, merged)
	}}, nil
}

// produceToKafka converts the results (in request order) to the Kafka
// response of req's version.
func (r *StorageNode) produceToKafka(req *kmsg.ProduceRequest, results []*storagev1.ProducePartitionResult) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = req.Version
	var nodes map[int32]bool
	i := 0
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for range t.Partitions {
			res := results[i]
			i++
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = res.GetPartition()
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = res.GetBaseOffset(), res.GetLogAppendTimeMs(), res.GetLogStartOffset()
			if res.GetError() != nil {
				rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			}
			rp.ErrorCode, rp.ErrorMessage = itemCode(res.GetError())
			for _, re := range res.GetRecordErrors() {
				er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
				er.RelativeOffset = re.GetBatchIndex()
				msg := re.GetMessage()
				er.ErrorMessage = &msg
				rp.ErrorRecords = append(rp.ErrorRecords, er)
			}
			if id, epoch, ok := leaderOf(res.GetError()); ok && req.Version >= 10 {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = id, epoch
				if nodes == nil {
					nodes = map[int32]bool{}
				}
				nodes[id] = true
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(nodes) > 0 {
		img := r.deps.Metadata.Load()
		for id := range nodes {
			n, ok := kafkaNodeOf(img, id)
			if !ok {
				// No Kafka address to give: the client refreshes
				// metadata instead.
				clearLeader(resp, id)
				continue
			}
			b := kmsg.NewProduceResponseBroker()
			b.NodeID, b.Host, b.Port, b.Rack = n.id, n.host, n.port, n.rack
			resp.Brokers = append(resp.Brokers, b)
		}
	}
	return resp
}

// clearLeader removes the current leader id from every partition that
// names it.
func clearLeader(resp *kmsg.ProduceResponse, id int32) {
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if cl := &resp.Topics[i].Partitions[j].CurrentLeader; cl.LeaderID == id {
				*cl = kmsg.NewProduceResponseTopicPartitionCurrentLeader()
			}
		}
	}
}
