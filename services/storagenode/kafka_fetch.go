package storagenode

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/naming"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
)

// kafkaFetchPart is one partition of a Kafka fetch.
type kafkaFetchPart struct {
	ti, pi    int // index of its answer in the response
	tp        replica.TP
	offset    int64
	maxBytes  int
	epoch     *int32 // current leader epoch to check, nil for none
	lastEpoch *int32 // last fetched epoch (divergence check), nil for none
	// refused is the answer of a partition refused before reading
	// (unknown topic id, bad input); it is never read.
	refused *edpb.Error

	// One read's outcome.
	data    *storage.ReadResult
	view    replica.View
	div     *replica.EpochEnd
	err     error
	changed <-chan struct{}
}

// kafkaFetch is one fetch request being served.
type kafkaFetch struct {
	req           *kmsg.FetchRequest
	resp          *kmsg.FetchResponse
	parts         []*kafkaFetchPart
	maxBytes      int
	minBytes      int
	readCommitted bool
	deadline      time.Time
}

// kafkaFetchFromRequest checks a fetch request the way the gRPC validator
// checks a gRPC fetch, resolves topic ids (v13+), and lays out the answer
// skeleton. A request-wide refusal (fetch sessions) is the returned code.
func (r *StorageNode) kafkaFetchFromRequest(ctx context.Context, req *kmsg.FetchRequest) (*kafkaFetch, int16) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.Version = req.Version
	// Fetch sessions are not kept (KIP-227 allows a broker that has none):
	// epoch 0 (new session) and -1 (no session) are full fetches answered
	// with session id 0, which makes clients stop asking; an incremental
	// epoch (> 0) names a session this node cannot have.
	if req.Version >= 7 && req.SessionEpoch > 0 {
		resp.ErrorCode = kafkaFetchSessionIDNotFound
		return &kafkaFetch{req: req, resp: resp}, kafkaFetchSessionIDNotFound
	}
	// A fetch naming a replica is a follower's (Kafka: ClusterAction on
	// the cluster); Sluice followers fetch over gRPC, so this is a client
	// claiming to be a broker.
	if req.ReplicaID >= 0 || (req.Version >= 15 && req.ReplicaState.ID >= 0) {
		if err := authz.Check(ctx, r.deps.Authorizer(), authz.ClusterAction, authz.Cluster, authz.ClusterName); err != nil {
			resp.ErrorCode = kafka.ErrorCode(err)
			return &kafkaFetch{req: req, resp: resp}, resp.ErrorCode
		}
	}
	f := &kafkaFetch{req: req, resp: resp, maxBytes: int(req.MaxBytes), minBytes: int(req.MinBytes), readCommitted: req.IsolationLevel == 1,
		deadline: time.Now().Add(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)}
	if req.Version < 3 || f.maxBytes <= 0 {
		f.maxBytes = defaultFetchMaxBytes
	}
	var ids *kafka.TopicIndex
	if req.Version >= 13 {
		ids = kafka.Topics(r.deps.Metadata.Load())
	}
	seen := map[replica.TP]bool{}
	// Read on each topic, checked once per topic (never per record).
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Read, authz.Topic)
	for ti, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		name := t.Topic
		known := true
		if ids != nil {
			name, known = ids.Name(t.TopicID)
		}
		var denied error
		if known {
			denied = topics.Check(name)
		}
		for pi, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			// Empty, never null: Kafka always sends a records field, and
			// librdkafka rejects a null one ("invalid MessageSetSize -1").
			rp.RecordBatches = []byte{}
			rt.Partitions = append(rt.Partitions, rp)
			fp := &kafkaFetchPart{ti: ti, pi: pi, tp: replica.TP{Topic: name, Partition: p.Partition}, offset: p.FetchOffset, maxBytes: int(p.PartitionMaxBytes)}
			f.parts = append(f.parts, fp)
			if req.Version >= 9 && p.CurrentLeaderEpoch >= 0 {
				e := p.CurrentLeaderEpoch
				fp.epoch = &e
			}
			if req.Version >= 12 && p.LastFetchedEpoch >= 0 {
				e := p.LastFetchedEpoch
				fp.lastEpoch = &e
			}
			if fp.maxBytes <= 0 {
				fp.maxBytes = defaultPartitionMaxBytes
			}
			// The checks of the gRPC validator (validateFetch), per
			// partition.
			switch {
			case !known:
				fp.refused = errs.New(errs.UnknownTopicID, "no topic has id %x", t.TopicID).Proto()
			case denied != nil:
				fp.refused = errs.ItemError(denied)
			case naming.ValidateTopic(name) != nil:
				fp.refused = errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist: %v", name, naming.ValidateTopic(name)).Proto()
			case p.Partition < 0:
				fp.refused = errs.New(errs.UnknownTopicOrPartition, "partition %d does not exist", p.Partition).Proto()
			case p.FetchOffset < 0:
				fp.refused = errs.New(errs.OffsetOutOfRange, "%s-%d: fetch offset %d is negative; use ListOffsets to find the earliest or latest offset",
					name, p.Partition, p.FetchOffset).Proto()
			case seen[fp.tp]:
				fp.refused = errs.Invalid(errs.InvalidRequest, "topics", "partition %s-%d appears more than once in the request", name, p.Partition).Proto()
			}
			seen[fp.tp] = true
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return f, 0
}

// read reads every partition once, within the request's byte budget, and
// reports whether the answer is ready: enough bytes, an error or a
// divergence to report, or the deadline passed.
func (r *StorageNode) readKafkaFetch(f *kafkaFetch) (collected int, ready bool) {
	budget := f.maxBytes
	for _, fp := range f.parts {
		if fp.refused != nil {
			ready = true
			continue
		}
		part, err := r.partition(fp.tp.Topic, fp.tp.Partition)
		if err != nil {
			fp.err, ready = err, true
			continue
		}
		fp.changed = part.Changed() // before reading, so no change is missed
		if budget <= 0 {
			// The response is full (KIP-74: the first batch may exceed the
			// limits, the rest wait): answer the offsets only.
			fp.view, fp.err = part.LeaderView(fp.epoch)
			ready = ready || fp.err != nil
			continue
		}
		fp.data, fp.view, fp.div, fp.err = part.ReadIsolated(fp.offset, min(fp.maxBytes, budget), fp.epoch, fp.lastEpoch, f.readCommitted)
		if fp.err != nil || fp.div != nil {
			ready = true
		}
		if fp.data != nil {
			collected += fp.data.Bytes
			budget -= fp.data.Bytes
		}
	}
	if collected >= f.maxBytes || collected >= f.minBytes && (collected > 0 || !time.Now().Before(f.deadline)) {
		ready = true
	}
	return collected, ready
}

// releaseReads gives back the reads of a round that is not answered.
func (f *kafkaFetch) releaseReads() {
	for _, fp := range f.parts {
		if fp.data != nil {
			fp.data.Release()
			fp.data = nil
		}
		fp.view, fp.div, fp.err = replica.View{}, nil, nil
	}
}

// answer fills the response from the last read, which it keeps: a
// partition's batches are the page cache's own bytes (no batch is copied,
// decoded or re-encoded), so the reads stay held until the listener has
// written the response and calls the Reply's Release (f.releaseReads), as
// the gRPC fetch holds its chunks until the transport has written them. A
// read that spans segments (several chunks) is the one copied, into one
// slice.
func (r *StorageNode) answerKafkaFetch(ctx context.Context, f *kafkaFetch) *kmsg.FetchResponse {
	var nodes map[int32]bool
	for _, fp := range f.parts {
		rp := &f.resp.Topics[fp.ti].Partitions[fp.pi]
		if fp.refused != nil {
			rp.ErrorCode, _ = itemCode(fp.refused)
			continue
		}
		if fp.err != nil {
			e := errs.ItemError(fp.err)
			rp.ErrorCode, _ = itemCode(e)
			if id, epoch, ok := leaderOf(e); ok && f.req.Version >= 12 {
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = id, epoch
				if nodes == nil {
					nodes = map[int32]bool{}
				}
				nodes[id] = true
			}
			if errs.CodeOf(fp.err) == errs.OffsetOutOfRange {
				// The bounds help a client reset (ReadIsolated read them).
				rp.HighWatermark, rp.LogStartOffset = fp.view.HighWatermark, fp.view.LogStart
			}
			continue
		}
		v := fp.view
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = v.HighWatermark, v.LastStable, v.LogStart
		if f.readCommitted {
			rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
		}
		if fp.div != nil {
			rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = fp.div.Epoch, fp.div.EndOffset
			continue
		}
		if fp.data == nil || fp.data.Bytes == 0 {
			continue
		}
		if f.readCommitted {
			// The client drops the batches of these (Kafka's way): the
			// batches themselves go out as they are in the log.
			for _, a := range r.abortedFor(fp, fp.data.NextOffset) {
				at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
				at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
				rp.AbortedTransactions = append(rp.AbortedTransactions, at)
			}
		}
		if len(fp.data.Chunks) == 1 {
			rp.RecordBatches = fp.data.Chunks[0].Data
		} else {
			rp.RecordBatches = fp.data.AppendTo(make([]byte, 0, fp.data.Bytes))
		}
		r.fetchedBytes.Add(ctx, int64(fp.data.Bytes))
	}
	if len(nodes) > 0 && f.req.Version >= 16 {
		img := r.deps.Metadata.Load()
		for id := range nodes {
			n, ok := kafkaNodeOf(img, id)
			if !ok {
				clearFetchLeader(f.resp, id)
				continue
			}
			b := kmsg.NewFetchResponseBroker()
			b.NodeID, b.Host, b.Port, b.Rack = n.id, n.host, n.port, n.rack
			f.resp.Brokers = append(f.resp.Brokers, b)
		}
	}
	return f.resp
}

// abortedFor lists the aborted transactions overlapping what a partition's
// read returned.
func (r *StorageNode) abortedFor(fp *kafkaFetchPart, next int64) []storage.AbortedTxn {
	part, ok := r.replicas.Get(fp.tp)
	if !ok {
		return nil
	}
	return part.Log().AbortedTransactions(fp.offset, next)
}

// clearFetchLeader removes the current leader id from every partition
// that names it.
func clearFetchLeader(resp *kmsg.FetchResponse, id int32) {
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if cl := &resp.Topics[i].Partitions[j].CurrentLeader; cl.LeaderID == id {
				*cl = kmsg.NewFetchResponseTopicPartitionCurrentLeader()
			}
		}
	}
}

// kafkaFetch serves Fetch (key 1) as the gRPC Fetch serves one round:
// whole batches from the page cache up to the byte limits, at most up to
// the high watermark (the last stable offset for read_committed), with
// the aborted transactions a read_committed reader drops. When there is
// not yet MinBytes to answer, the wait (up to MaxWaitMillis, woken by new
// data as the gRPC fetch is) runs after the handler returns, so the
// connection goes on with its next request meanwhile.
func (r *StorageNode) kafkaFetch(ctx context.Context, kr *kafka.Request) (kafka.Reply, error) {
	req, ok := kr.Msg.(*kmsg.FetchRequest)
	if !ok {
		return kafka.Reply{}, fmt.Errorf("fetch: unexpected message %T", kr.Msg)
	}
	f, code := r.kafkaFetchFromRequest(ctx, req)
	if code != 0 {
		return kafka.Now(f.resp), nil
	}
	roles := r.replicas.Changed()
	_, ready := r.readKafkaFetch(f)
	if ready {
		return kafka.Reply{Msg: r.answerKafkaFetch(context.Background(), f), Release: f.releaseReads}, nil
	}
	// What was read is given back while waiting (a held chunk would hold
	// up a truncation of its segment); the answer reads again.
	f.releaseReads()
	return kafka.Reply{Wait: func(ctx context.Context) kmsg.Response {
		// A stopping listener is answered now rather than at the
		// deadline: the client fetches again from another node.
		listener := kafka.Stopping(ctx)
		for {
			f.wait(ctx, roles, r.replicas.Stopping(), listener)
			f.releaseReads()
			roles = r.replicas.Changed()
			_, ready = r.readKafkaFetch(f)
			if ready || ctx.Err() != nil || !time.Now().Before(f.deadline) || isClosed(r.replicas.Stopping()) || isClosed(listener) {
				return r.answerKafkaFetch(ctx, f)
			}
		}
	}, Release: f.releaseReads}, nil
}

// wait blocks until a partition read has new data, a replica changes
// role, the node or the listener stops, the deadline passes or ctx ends.
func (f *kafkaFetch) wait(ctx context.Context, roles, stopping, listener <-chan struct{}) {
	timer := time.NewTimer(time.Until(f.deadline))
	defer timer.Stop()
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(roles)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stopping)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(listener)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
	}
	for _, fp := range f.parts {
		if fp.changed != nil {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(fp.changed)})
		}
	}
	reflect.Select(cases)
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
