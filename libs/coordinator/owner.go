package coordinator

import (
	"context"
	"time"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/replica"
)

// Placement is how this process coordinates one partition of an internal
// topic: Local is the replica it leads, in leader epoch Epoch; nil Local is
// a coordinator of its own writing to a remote leader.
type Placement struct {
	Local *replica.Partition
	Epoch int32
}

// Wanted returns the partitions of topic that metadata says this process
// (node me, running role) coordinates. A partition led here counts once the
// local replica leads it in the leader epoch metadata names (so a shard
// loads in that epoch); one led elsewhere counts when this process is the
// coordinator of its own that metadata.Image.CoordinatorOf picks. replicas
// is nil in a process without storage.
func Wanted(img *metadata.Image, replicas *replica.Manager, topic, role string, me int32) map[int32]Placement {
	wanted := map[int32]Placement{}
	t, ok := img.Topics[topic]
	if !ok {
		return wanted
	}
	for _, ps := range t.Partitions {
		b, atLeader := img.CoordinatorOf(topic, ps.GetPartition(), role)
		if b == nil || b.GetId() != me {
			continue
		}
		if !atLeader {
			wanted[ps.GetPartition()] = Placement{}
			continue
		}
		if replicas == nil {
			continue
		}
		p, ok := replicas.Get(replica.TP{Topic: topic, Partition: ps.GetPartition()})
		if !ok {
			continue
		}
		if v := p.View(); v.IsLeader && v.LeaderEpoch == ps.GetLeaderEpoch() {
			wanted[ps.GetPartition()] = Placement{Local: p, Epoch: v.LeaderEpoch}
		}
	}
	return wanted
}

// CoordinatorOf returns the process that coordinates partition pid of
// topic, or COORDINATOR_NOT_AVAILABLE when none does.
func CoordinatorOf(img *metadata.Image, topic, role string, pid int32) (*commonv1.Broker, *errs.Error) {
	b, _ := img.CoordinatorOf(topic, pid, role)
	if b == nil {
		return nil, errs.New(errs.CoordinatorNotAvailable,
			"%s-%d has no coordinator now: its leader does not run the %s role (or there is none) and no live process runs that role alone", topic, pid, role)
	}
	return b, nil
}

// NotLoaded is the answer for a key (described by subject, such as
// `group "g"`) of partition pid when this process has no loaded shard for
// it: COORDINATOR_LOAD_IN_PROGRESS when this process is taking it over,
// NOT_COORDINATOR with a hint when another process coordinates it,
// COORDINATOR_NOT_AVAILABLE when none does.
func NotLoaded(img *metadata.Image, topic, role string, me int32, key, subject string, pid int32) *errs.Error {
	b, e := CoordinatorOf(img, topic, role, pid)
	if e != nil {
		return e
	}
	if b.GetId() == me {
		return errs.New(errs.CoordinatorLoadInProgress, "%s: this node is taking over %s-%d", subject, topic, pid)
	}
	addr := metadata.BrokerAddress(b)
	return errs.New(errs.NotCoordinator, "node %d does not coordinate %s; node %d at %s does", me, subject, b.GetId(), addr).
		WithCoordinator(&edpb.CoordinatorHint{Key: key, NodeId: b.GetId(), Address: addr})
}

// Session is a process's broker session with the controller, as
// membership.Member.Session reports it: the broker epoch, and whether the
// controller certainly still holds the session (a heartbeat of that epoch
// was answered within the session timeout).
type Session func() (epoch int64, live bool)

// SessionError refuses to serve a loaded shard of partition pid of topic
// (described by subject, such as `group "g"`) while this process may have
// lost it without knowing yet; nil session (no membership) never refuses.
// Writes are fenced by the log, but reads answer from memory, and a
// coordinator cut off from the controller keeps its shards until its
// metadata says otherwise: seconds after the controller expired its session
// and another process took the partition over and acknowledged writes
// there. So a shard serves only while the session is certainly alive, and a
// shard of a coordinator of its own (remote: no local replica) only in the
// broker epoch it loaded in (loadedEpoch): after registering again, the
// process reloads the partition once metadata names it in the new epoch.
func SessionError(session Session, topic string, pid int32, remote bool, loadedEpoch int64, subject string) *errs.Error {
	if session == nil {
		return nil
	}
	epoch, live := session()
	if !live {
		return errs.New(errs.NotCoordinator, "%s: this node's session with the controller may have expired (no heartbeat answered within the session timeout), so another node may coordinate %s-%d now; find the coordinator again",
			subject, topic, pid)
	}
	if remote && epoch != loadedEpoch {
		return errs.New(errs.NotCoordinator, "%s: this node registered again (broker epoch %d; %s-%d was loaded in epoch %d) and reloads the partition if it still coordinates it; find the coordinator again",
			subject, epoch, topic, pid, loadedEpoch)
	}
	return nil
}

// WriteError maps a failed append to a coordinator's partition as Kafka's
// coordinators do: a lost leadership means NOT_COORDINATOR (find the new
// one), a write that could not reach its replicas COORDINATOR_NOT_AVAILABLE
// (retry), a transactional write or marker refused for its producer or
// coordinator epoch keeps the leader's code, anything else is an unknown
// server error. stopped says the shard
// was unloaded meanwhile.
func WriteError(err error, topic string, pid int32, stopped bool) *errs.Error {
	switch errs.CodeOf(err) {
	case errs.NotLeaderOrFollower, errs.FencedLeaderEpoch, errs.UnknownLeaderEpoch, errs.NotCoordinator:
		return errs.New(errs.NotCoordinator, "this node no longer leads %s-%d: %v", topic, pid, err)
	case errs.NotEnoughReplicas, errs.NotEnoughReplicasAfterAppend, errs.RequestTimedOut, errs.UnknownTopicOrPartition, errs.StorageError:
		return errs.New(errs.CoordinatorNotAvailable, "writing %s-%d: %v", topic, pid, err)
	case errs.InvalidProducerEpoch, errs.ProducerFenced, errs.TransactionCoordinatorFenced, errs.InvalidTxnState:
		// The leader refused a transactional batch or a marker for what it
		// says of its producer: that is the answer, as the leader gave it.
		return errs.From(err)
	}
	if stopped {
		return errs.New(errs.NotCoordinator, "this node stopped coordinating %s-%d", topic, pid)
	}
	return errs.New(errs.UnknownServerError, "writing %s-%d: %v", topic, pid, err)
}

// Await waits for a write's outcome or for ctx. A write still pending when
// ctx ends is answered REQUEST_TIMED_OUT: its outcome is unknown.
func Await(ctx context.Context, topic string, done <-chan *errs.Error) *errs.Error {
	select {
	case e := <-done:
		return e
	case <-ctx.Done():
		return errs.New(errs.RequestTimedOut, "the write to %s was not acknowledged before the call ended; it may still apply", topic)
	}
}

// Run drives a coordinator role until ctx ends: reconcile runs on every
// change of metadata or of the local replicas, and once a second besides
// (for what no signal announces, such as a shard marked stale by a refused
// write); tick runs every tickEvery with the time from now.
func Run(ctx context.Context, md *metadata.Cache, replicas *replica.Manager, now func() time.Time, tickEvery time.Duration,
	reconcile func(), tick func(time.Time)) {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	const resync = time.Second
	var replicasChanged, metaChanged <-chan struct{}
	var last time.Time
	for {
		if n := now(); last.IsZero() || n.Sub(last) >= resync {
			if replicas != nil {
				replicasChanged = replicas.Changed()
			}
			metaChanged = md.Changed()
			reconcile()
			last = n
		}
		select {
		case <-ctx.Done():
			return
		case <-replicasChanged:
			last = time.Time{}
		case <-metaChanged:
			last = time.Time{}
		case <-t.C:
			tick(now())
		}
	}
}

// Reconcile brings a role's shards (by partition; the caller holds the lock
// that guards the map) in line with wanted: a shard is dropped when its
// partition is no longer wanted or keep says it no longer fits (another
// placement, a stale fence, a new broker session), and one is created for
// every wanted partition without a shard. It returns the shards to unload
// and those to load, for the caller to do outside its lock.
func Reconcile[S any](shards map[int32]S, wanted map[int32]Placement, keep func(s S, w Placement) bool,
	create func(id int32, w Placement) S) (drop, start []S) {
	for id, s := range shards {
		if w, ok := wanted[id]; !ok || !keep(s, w) {
			drop = append(drop, s)
			delete(shards, id)
		}
	}
	for id, w := range wanted {
		if _, ok := shards[id]; ok {
			continue
		}
		s := create(id, w)
		shards[id] = s
		start = append(start, s)
	}
	return drop, start
}
