package storagenode

import (
	"fmt"
	"reflect"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/storage"
)

// batchesField is the field number of the batch bytes in FetchResponse and
// FollowerFetchResponse (one Frame encoder serves both, so they must agree):
// the bytes follow the encoded head straight from the page cache.
var batchesField = func() protowire.Number {
	n := wire.FieldNumber(&storagev1.FetchResponse{}, "batches")
	if f := wire.FieldNumber(&replicationv1.FollowerFetchResponse{}, "batches"); f != n {
		panic(fmt.Sprintf("storagenode: batches is field %d of FetchResponse but %d of FollowerFetchResponse", n, f))
	}
	return n
}()

const (
	defaultPartitionMaxBytes = 1 << 20
	defaultFetchMaxBytes     = 50 << 20
)

// frameOf turns a message head and a read result into a frame whose body is
// the read's chunks (copies or slices of segment maps), released as the
// transport writes them.
func frameOf(head []byte, data *storage.ReadResult) *wire.Frame {
	f := &wire.Frame{Head: head, Field: batchesField}
	for i := range data.Chunks {
		c := &data.Chunks[i]
		f.Body = append(f.Body, c.Data)
		chunk := c.Take()
		f.Release = append(f.Release, chunk.Release)
	}
	return f
}

// sendFollowerChunk sends a chunk to a follower without copying its bytes.
func sendFollowerChunk(stream grpc.ServerStream, resp *replicationv1.FollowerFetchResponse, data *storage.ReadResult) error {
	head, err := wire.HeadOf(resp)
	if err != nil {
		data.Release()
		return err
	}
	f := frameOf(head, data)
	if err := stream.SendMsg(f); err != nil {
		f.Free()
		return err
	}
	return nil
}

// fetchState is one partition of a fetch stream.
type fetchState struct {
	tp          replica.TP
	offset      int64
	maxBytes    int
	epoch       *int32
	lastEpoch   *int32
	lastFetched bool // lastEpoch checked once, at the start
	done        bool
	// denied is the caller's refusal to read the topic, answered as the
	// partition's error.
	denied error
}

// Fetch streams chunks of whole batches from the page cache (see the
// service comment). Each chunk's bytes go from the segment's memory map to
// the socket without a copy in Sluice; in RECORDS format the server decodes
// them for simple clients.
func (r *StorageNode) Fetch(req *storagev1.FetchRequest, stream grpc.ServerStreamingServer[storagev1.FetchResponse]) error {
	ctx := stream.Context()
	states := make([]*fetchState, len(req.GetPartitions()))
	// Read on each topic, checked once per topic when the stream starts.
	topics := authz.NewMemo(ctx, r.deps.Authorizer(), authz.Read, authz.Topic)
	for i, fp := range req.GetPartitions() {
		mb := int(fp.GetPartitionMaxBytes())
		if mb <= 0 {
			mb = defaultPartitionMaxBytes
		}
		states[i] = &fetchState{tp: replica.TP{Topic: fp.GetTopic(), Partition: fp.GetPartition()}, offset: fp.GetFetchOffset(),
			maxBytes: mb, epoch: fp.CurrentLeaderEpoch, lastEpoch: fp.LastFetchedEpoch, denied: topics.Check(fp.GetTopic())}
	}
	maxBytes := int(req.GetMaxBytes())
	if maxBytes <= 0 {
		maxBytes = defaultFetchMaxBytes
	}
	records := req.GetFormat() == storagev1.RecordFormat_RECORD_FORMAT_RECORDS
	readCommitted := req.GetIsolationLevel() == commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	deadline := time.Now().Add(time.Duration(req.GetMaxWaitMs()) * time.Millisecond)
	collected := 0
	fq := r.newFetchQuota(ctx)
	var w fetchWaiter
	defer w.stop()
	for {
		roles := r.replicas.Changed() // before reading, so no change is missed
		w.waits = w.waits[:0]
		active := 0
		more := false
		budget := maxBytes - collected
		if req.GetFollow() {
			budget = maxBytes
		}
		for _, st := range states {
			if st.done {
				continue
			}
			active++
			n, ch, drained, err := r.fetchOne(stream, st, min(st.maxBytes, max(budget, 1)), records, readCommitted)
			if err != nil {
				return err
			}
			collected += n
			budget -= n
			fq.sent(stream, n)
			more = more || n > 0 && !drained
			if ch != nil {
				w.waits = append(w.waits, ch)
			}
		}
		if active == 0 {
			return nil
		}
		if !req.GetFollow() {
			// Kafka's rule: answer once min_bytes are there (and something
			// is), the response is full, or max_wait_ms has passed with
			// whatever there is.
			if collected >= maxBytes || collected > 0 && collected >= int(req.GetMinBytes()) || !time.Now().Before(deadline) {
				return nil
			}
		} else if collected > 0 {
			collected = 0
			if more {
				continue // keep draining while data is there
			}
			// Every partition that sent was read up to its bound: its
			// channel, taken before the read, is closed already if more
			// came since, so waiting on it misses nothing and saves a
			// read that would find nothing.
		}
		// Wait for new data on any partition, a role change, or the end.
		var expire time.Duration = -1
		if !req.GetFollow() {
			expire = time.Until(deadline)
		}
		switch w.wait(ctx.Done(), roles, r.replicas.Stopping(), expire) {
		case waitDone:
			return nil
		case waitStopping:
			return errs.New(errs.NodeNotReady, "node %d is stopping; fetch from the new leader", r.replicas.NodeID())
		}
	}
}

// What ended a fetch stream's wait.
const (
	waitDone = iota
	waitStopping
	waitWoken
)

// fetchWaiter waits for the first of a fetch stream's wake-ups. It is
// reused for the stream's life: its timer is made once and the select cases
// of a multi-partition wait are rebuilt in place, so a wake-up allocates
// nothing. With one partition (a consumer's usual stream) the wait is a
// plain select, without reflect.
type fetchWaiter struct {
	waits []<-chan struct{}
	timer *time.Timer
	cases []reflect.SelectCase
}

// wait waits for done, stopping, roles, any of w.waits, or expire (a
// negative expire never comes), and says which came first.
func (w *fetchWaiter) wait(done <-chan struct{}, roles, stopping <-chan struct{}, expire time.Duration) int {
	var tc <-chan time.Time
	if expire >= 0 {
		if w.timer == nil {
			w.timer = time.NewTimer(expire)
		} else {
			w.timer.Reset(expire)
		}
		tc = w.timer.C
	}
	var one <-chan struct{}
	switch len(w.waits) {
	case 0:
	case 1:
		one = w.waits[0]
	default:
		return w.waitMany(done, roles, stopping, tc)
	}
	select {
	case <-done:
		return waitDone
	case <-stopping:
		return waitStopping
	case <-roles:
	case <-tc:
	case <-one:
	}
	return waitWoken
}

// waitMany is wait over several partitions' channels.
func (w *fetchWaiter) waitMany(done <-chan struct{}, roles, stopping <-chan struct{}, tc <-chan time.Time) int {
	w.cases = append(w.cases[:0],
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stopping)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(roles)},
	)
	if tc != nil {
		w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tc)})
	}
	for _, c := range w.waits {
		w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	chosen, _, _ := reflect.Select(w.cases)
	clear(w.cases) // drop the channels until the next wait
	switch chosen {
	case 0:
		return waitDone
	case 1:
		return waitStopping
	}
	return waitWoken
}

// stop releases the timer.
func (w *fetchWaiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// fetchOne sends what one partition has from its position and returns the
// bytes sent, the channel that signals more (taken before the read) and
// whether the read reached the partition's readable end (the high
// watermark, or the last stable offset for read_committed) as the read saw
// it.
func (r *StorageNode) fetchOne(stream grpc.ServerStream, st *fetchState, maxBytes int, records, readCommitted bool) (int, <-chan struct{}, bool, error) {
	resp := &storagev1.FetchResponse{Topic: st.tp.Topic, Partition: st.tp.Partition, NextOffset: st.offset}
	err := st.denied
	var part *replica.Partition
	if err == nil {
		part, err = r.partition(st.tp.Topic, st.tp.Partition)
	}
	if err != nil {
		st.done = true
		resp.Error = errs.ItemError(err)
		return 0, nil, false, stream.SendMsg(resp)
	}
	changed := part.Changed()
	var lastEpoch *int32
	if !st.lastFetched {
		lastEpoch, st.lastFetched = st.lastEpoch, true
	}
	data, v, div, err := part.ReadIsolated(st.offset, maxBytes, st.epoch, lastEpoch, readCommitted)
	resp.HighWatermark, resp.LastStableOffset, resp.LogStartOffset = v.HighWatermark, v.LastStable, v.LogStart
	switch {
	case err != nil:
		st.done = true
		resp.Error = errs.ItemError(err)
		return 0, nil, false, stream.SendMsg(resp)
	case div != nil:
		st.done = true
		resp.DivergingEpoch = &storagev1.EpochEndOffset{Epoch: div.Epoch, EndOffset: div.EndOffset}
		return 0, nil, false, stream.SendMsg(resp)
	case data == nil || len(data.Chunks) == 0:
		if data != nil {
			data.Release()
		}
		return 0, changed, true, nil
	}
	n := data.Bytes
	end := v.HighWatermark
	if readCommitted {
		end = v.LastStable
	}
	r.fetchedBytes.Add(stream.Context(), int64(n))
	from := st.offset
	st.offset = data.NextOffset
	resp.NextOffset = data.NextOffset
	var aborted []storage.AbortedTxn
	if readCommitted {
		// The reader drops the batches of these (Kafka's way), so the
		// batches themselves still go out untouched from the page cache.
		aborted = part.Log().AbortedTransactions(from, data.NextOffset)
		if !records {
			for _, a := range aborted {
				resp.AbortedTransactions = append(resp.AbortedTransactions, &storagev1.AbortedTransaction{ProducerId: a.ProducerID, FirstOffset: a.FirstOffset})
			}
		}
	}
	if records {
		recs, badAt, derr := decodeRecords(data, from, aborted)
		data.Release()
		if derr != nil {
			// Records before the unreadable batch go out first; the next
			// round starts at the batch and answers with the error, so a
			// reader learns where the log is damaged and is never skipped
			// past it silently.
			if len(recs.Records) == 0 {
				st.done = true
				resp.NextOffset = badAt
				resp.Error = errs.ItemError(errs.New(errs.InvalidRecord,
					"%s-%d: the batch at offset %d cannot be decoded (%s); fetch from a later offset to skip it",
					st.tp.Topic, st.tp.Partition, badAt, errs.From(derr).Message))
				return 0, nil, false, stream.SendMsg(resp)
			}
			st.offset, resp.NextOffset = badAt, badAt
		}
		resp.Records = recs
		return n, changed, st.offset >= end, stream.SendMsg(resp)
	}
	head, err := wire.HeadOf(resp)
	if err != nil {
		data.Release()
		return 0, nil, false, err
	}
	f := frameOf(head, data)
	if err := stream.SendMsg(f); err != nil {
		f.Free()
		return 0, nil, false, err
	}
	return n, changed, st.offset >= end, nil
}

// inAborted reports whether a transactional batch of producer pid at offset
// belongs to one of the aborted transactions.
func inAborted(aborted []storage.AbortedTxn, pid, offset int64) bool {
	for _, a := range aborted {
		if a.ProducerID == pid && a.FirstOffset <= offset && offset <= a.LastOffset {
			return true
		}
	}
	return false
}

// decodeRecords decodes batches for a RECORDS-format fetch, skipping
// control batches, batches of aborted transactions and records below from. On a batch it cannot decode it
// returns the records before that batch, the batch's offset and the error.
func decodeRecords(data *storage.ReadResult, from int64, aborted []storage.AbortedTxn) (*commonv1.Records, int64, error) {
	out := &commonv1.Records{}
	var it record.Iterator
	for _, c := range data.Chunks {
		it.Reset(c.Data)
		for it.Next() {
			if b := it.Batch(); b.Attributes.Control() || b.Attributes.Transactional() && inAborted(aborted, b.ProducerID, b.BaseOffset) {
				continue
			}
			rec := it.Record()
			if rec.Offset < from {
				continue
			}
			pr := &commonv1.Record{Offset: rec.Offset, TimestampMs: rec.Timestamp, LeaderEpoch: it.Batch().PartitionLeaderEpoch}
			if rec.Key != nil {
				pr.Key = append([]byte{}, rec.Key...)
			}
			if rec.Value != nil {
				pr.Value = append([]byte{}, rec.Value...)
			}
			for _, h := range rec.Headers {
				pr.Headers = append(pr.Headers, &commonv1.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
			}
			out.Records = append(out.Records, pr)
		}
		if err := it.Err(); err != nil {
			bad := it.ErrOffset()
			if bad < 0 { // header unreadable: the fault is where reading stopped
				bad = from
				if n := len(out.Records); n > 0 {
					bad = out.Records[n-1].GetOffset() + 1
				}
			}
			// Records of the bad batch decoded before the fault stay with it.
			for len(out.Records) > 0 && out.Records[len(out.Records)-1].GetOffset() >= bad {
				out.Records = out.Records[:len(out.Records)-1]
			}
			return out, bad, err
		}
	}
	return out, 0, nil
}
