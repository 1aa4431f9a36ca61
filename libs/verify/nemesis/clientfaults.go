package nemesis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// ClientFaults injects the network faults that sit between the workload's
// clients and the cluster, where no process fault reaches: a request
// delivered twice with the copy late, and one member's heartbeats held back.
// Its DialOptions go on every client of the workload
// (verify.Config.DialOptions); the faults are off until a LateEndTxn or
// StallMember step turns them on.
type ClientFaults struct {
	// GroupPrefix restricts StallMember to groups whose id starts with it.
	GroupPrefix string
	// LateDelay is how long after the next transaction's AddPartitionsToTxn
	// the late EndTxn copy is sent (default 50 ms: the next transaction has
	// written by then).
	LateDelay time.Duration

	mu          sync.Mutex
	lateUntil   time.Time
	ended       map[string]lateEnd // transactional id -> its last committed EndTxn
	answers     map[string]int     // error names of late EndTxn copies
	stallUntil  time.Time
	stallMatch  string // held groups' ids contain it
	stalled     string // "group/member" whose heartbeats are held
	held        int
	commitUntil time.Time
	commitMatch string
	commits     map[string]lateCommit // "group/member" -> its last acknowledged commit
	commitAns   map[string]int
	wg          sync.WaitGroup
}

type lateCommit struct {
	req *groupv1.OffsetCommitRequest
	cc  *grpc.ClientConn
}

type lateEnd struct {
	req *txnv1.EndTxnRequest
	cc  *grpc.ClientConn
}

// DialOptions returns the interceptor to install on the workload's clients.
func (f *ClientFaults) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.intercept)}
}

// StartLateEndTxn turns on late EndTxn copies for d: every committed
// EndTxn of a transactional producer is remembered, and when the same
// transactional id adds partitions to its next transaction, a copy of that
// EndTxn is delivered again, as a network that held the first copy would.
// Kafka's hardened protocol (KIP-890) bumps the epoch on every EndTxn, so
// the copy is fenced; without the bump it ends the next transaction early
// (Jepsen's Bufstream finding, KAFKA-17754).
func (f *ClientFaults) StartLateEndTxn(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lateUntil = time.Now().Add(d)
	f.ended = map[string]lateEnd{}
	f.answers = map[string]int{}
}

// StartStallMember holds every heartbeat of one group member (the first to
// heartbeat from now on) for d: the coordinator expires its session and
// rebalances while the member keeps consuming and committing in its old
// generation, which the coordinator must refuse (KIP-447, KIP-1251).
// match, if set, restricts it to groups whose id contains match.
func (f *ClientFaults) StartStallMember(match string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stallUntil = time.Now().Add(d)
	f.stallMatch, f.stalled, f.held = match, "", 0
}

// StartLateCommit turns on late offset-commit copies for d, in groups
// whose id contains match: each member's last acknowledged OffsetCommit is
// remembered, and when the member commits in a newer generation, a copy of
// the old one is delivered again after it. The coordinator must refuse a
// commit of an older generation (ILLEGAL_GENERATION); accepting it moves the
// group's committed offsets back. Use it on classic groups only: the
// consumer protocol accepts an older member epoch from a partition's owner
// (KIP-1251), so a late copy there may be a legitimate regression that the
// workload's history does not show.
func (f *ClientFaults) StartLateCommit(match string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commitUntil, f.commitMatch = time.Now().Add(d), match
	f.commits, f.commitAns = map[string]lateCommit{}, map[string]int{}
}

// Stop ends the client faults, waits for late copies in flight, and
// describes what was done.
func (f *ClientFaults) Stop(k Kind) string {
	f.mu.Lock()
	switch k {
	case LateEndTxn:
		f.lateUntil = time.Time{}
	case StallMember:
		f.stallUntil = time.Time{}
	case LateCommit:
		f.commitUntil = time.Time{}
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch k {
	case LateEndTxn:
		if len(f.answers) == 0 {
			return "no late EndTxn sent (no transaction committed and began again)"
		}
		return "late EndTxn answers: " + tally(f.answers)
	case StallMember:
		if f.stalled == "" {
			return "no member heartbeated"
		}
		return fmt.Sprintf("held %d heartbeats of %s", f.held, f.stalled)
	case LateCommit:
		if len(f.commitAns) == 0 {
			return "no late commit sent (no member committed in a newer generation)"
		}
		return "late commit answers: " + tally(f.commitAns)
	}
	return ""
}

// tally lists the answers counted in m, such as "OK×3, INVALID_PRODUCER_EPOCH×1",
// in name order.
func tally(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// answerName names the answer to a late copy: "OK", the error the reply
// carried, or the transport error that kept it from arriving.
func answerName(transportErr error, replyErr *errs.Error) string {
	switch {
	case transportErr != nil:
		return "transport: " + errs.Name(errs.CodeOf(transportErr))
	case replyErr != nil:
		return errs.Name(errs.CodeOf(replyErr))
	}
	return "OK"
}

func (f *ClientFaults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch r := req.(type) {
	case *txnv1.EndTxnRequest:
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && r.GetCommit() && errs.FromProto(reply.(*txnv1.EndTxnResponse).GetError()) == nil {
			f.mu.Lock()
			if time.Now().Before(f.lateUntil) {
				f.ended[r.GetTransactionalId()] = lateEnd{req: &txnv1.EndTxnRequest{TransactionalId: r.GetTransactionalId(),
					ProducerId: r.GetProducerId(), ProducerEpoch: r.GetProducerEpoch(), Commit: true}, cc: cc}
			}
			f.mu.Unlock()
		}
		return err
	case *txnv1.AddPartitionsToTxnRequest:
		err := invoker(ctx, method, req, reply, cc, opts...)
		f.mu.Lock()
		le, ok := f.ended[r.GetTransactionalId()]
		if ok && time.Now().Before(f.lateUntil) {
			delete(f.ended, r.GetTransactionalId())
			f.wg.Add(1)
			go f.deliverLate(le)
		}
		f.mu.Unlock()
		return err
	case *groupv1.HeartbeatRequest:
		f.hold(ctx, r.GetGroupId(), r.GetMemberId())
	case *groupv1.ConsumerGroupHeartbeatRequest:
		f.hold(ctx, r.GetGroupId(), r.GetMemberId())
	case *groupv1.OffsetCommitRequest:
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			f.commitDone(r, reply.(*groupv1.OffsetCommitResponse), cc)
		}
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (f *ClientFaults) deliverLate(le lateEnd) {
	defer f.wg.Done()
	delay := f.LateDelay
	if delay == 0 {
		delay = 50 * time.Millisecond
	}
	time.Sleep(delay)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp txnv1.EndTxnResponse
	err := le.cc.Invoke(ctx, txnv1.TransactionCoordinatorService_EndTxn_FullMethodName, le.req, &resp)
	name := answerName(err, errs.FromProto(resp.GetError()))
	f.mu.Lock()
	f.answers[name]++
	f.mu.Unlock()
}

// hold blocks a heartbeat of the stalled member until the stall ends.
func (f *ClientFaults) hold(ctx context.Context, group, member string) {
	if member == "" || !strings.HasPrefix(group, f.GroupPrefix) {
		return
	}
	f.mu.Lock()
	until := f.stallUntil
	if !time.Now().Before(until) || !strings.Contains(group, f.stallMatch) {
		f.mu.Unlock()
		return
	}
	id := group + "/" + member
	if f.stalled == "" {
		f.stalled = id
	}
	if f.stalled != id {
		f.mu.Unlock()
		return
	}
	f.held++
	f.mu.Unlock()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// commitDone remembers an acknowledged commit and, when it is of a newer
// generation than the member's previous one, sends that previous one again.
func (f *ClientFaults) commitDone(r *groupv1.OffsetCommitRequest, resp *groupv1.OffsetCommitResponse, cc *grpc.ClientConn) {
	for _, res := range resp.GetResults() {
		if errs.FromProto(res.GetError()) != nil {
			return // only wholly acknowledged commits
		}
	}
	if r.GetMemberId() == "" || !strings.HasPrefix(r.GetGroupId(), f.GroupPrefix) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !time.Now().Before(f.commitUntil) || !strings.Contains(r.GetGroupId(), f.commitMatch) {
		return
	}
	key := r.GetGroupId() + "/" + r.GetMemberId()
	prev, ok := f.commits[key]
	f.commits[key] = lateCommit{req: proto.Clone(r).(*groupv1.OffsetCommitRequest), cc: cc}
	if ok && prev.req.GetGenerationIdOrMemberEpoch() < r.GetGenerationIdOrMemberEpoch() {
		f.wg.Add(1)
		go f.deliverLateCommit(prev)
	}
}

func (f *ClientFaults) deliverLateCommit(lc lateCommit) {
	defer f.wg.Done()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp groupv1.OffsetCommitResponse
	err := lc.cc.Invoke(ctx, groupv1.GroupCoordinatorService_OffsetCommit_FullMethodName, lc.req, &resp)
	var replyErr *errs.Error // the first partition's error
	for _, res := range resp.GetResults() {
		if replyErr = errs.FromProto(res.GetError()); replyErr != nil {
			break
		}
	}
	f.mu.Lock()
	f.commitAns[answerName(err, replyErr)]++
	f.mu.Unlock()
}
