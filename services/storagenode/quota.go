package storagenode

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/auth"
)

// Client quotas on the gRPC data path (the Kafka listener has its own, see
// libs/kafka/quota.go). A call's client is its authenticated principal and
// the client id the SDK sends in the sluice-client-id metadata ("" when
// absent). A client over its quota is held, never refused:
//
//   - Produce: the reply waits for the throttle time, which it reports in
//     throttle_time_ms and in the sluice-throttle-time-ms header.
//   - ProduceStream: each response is sent when ready with
//     throttle_time_ms set, and the stream reads the client's next request
//     only once the throttle time has passed (as the Kafka listener mutes
//     a connection, KIP-219); flow control then holds the client's sends.
//   - Fetch: the stream sends nothing more until the throttle time has
//     passed; the sluice-throttle-time-ms trailer reports the total held.

// ClientIDHeader is the gRPC metadata key of the caller's client id.
const ClientIDHeader = "sluice-client-id"

// ThrottleHeader is the gRPC header (Produce) or trailer (Fetch) that
// reports how long a call was held by a quota, in milliseconds.
const ThrottleHeader = "sluice-throttle-time-ms"

// quotaClient returns who a call is from, as quotas see it, and whether
// quotas apply to it: the cluster's own processes (a role certificate) are
// never throttled, as Kafka keeps inter-broker traffic out of client
// quotas: a default quota must not slow the coordinators' writes of
// offsets and transaction state.
func quotaClient(ctx context.Context) (principal, clientID string, ok bool) {
	principal = auth.Anonymous.String()
	if id, found := auth.FromContext(ctx); found {
		if id.Role != "" {
			return "", "", false
		}
		principal = id.Principal.String()
	}
	if v := metadata.ValueFromIncomingContext(ctx, ClientIDHeader); len(v) > 0 {
		clientID = v[0]
	}
	return principal, clientID, true
}

// produceBytes is what a produce request counts against
// producer_byte_rate: its batches' bytes, or its plain records' keys and
// values.
func produceBytes(req *storagev1.ProduceRequest) int {
	n := 0
	for _, pp := range req.GetPartitions() {
		if b := pp.GetBatches(); b != nil {
			n += len(b)
			continue
		}
		for _, rec := range pp.GetRecords().GetRecords() {
			n += len(rec.GetKey()) + len(rec.GetValue())
		}
	}
	return n
}

// recordProduce records a produce request that took handling to append and
// returns its throttle time.
func (r *StorageNode) recordProduce(principal, clientID string, req *storagev1.ProduceRequest, handling time.Duration) time.Duration {
	q := r.deps.Quotas
	if q == nil {
		return 0
	}
	return max(q.RecordProduce(principal, clientID, produceBytes(req)), q.RecordRequestTime(principal, clientID, handling))
}

// hold waits for d or the end of ctx.
func hold(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func throttleMs(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32(min(d.Milliseconds()+1, 1<<31-1))
}

// fetchQuota measures one Fetch stream against consumer_byte_rate.
type fetchQuota struct {
	r                   *StorageNode
	principal, clientID string
	held                time.Duration
}

func (r *StorageNode) newFetchQuota(ctx context.Context) *fetchQuota {
	if r.deps.Quotas == nil {
		return nil
	}
	p, c, ok := quotaClient(ctx)
	if !ok {
		return nil
	}
	return &fetchQuota{r: r, principal: p, clientID: c}
}

// sent records n bytes sent and holds the stream while the client is over
// its quota.
func (f *fetchQuota) sent(stream grpc.ServerStream, n int) {
	if f == nil || n <= 0 {
		return
	}
	d := f.r.deps.Quotas.RecordFetch(f.principal, f.clientID, n)
	if d <= 0 {
		return
	}
	f.held += d
	stream.SetTrailer(metadata.Pairs(ThrottleHeader, strconv.Itoa(int(throttleMs(f.held)))))
	hold(stream.Context(), d)
}
