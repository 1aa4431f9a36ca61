package controller

import (
	"slices"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// The partition rules below are pure functions of a partition's state and
// the nodes' states, so they are tested exhaustively without etcd.

// nodeState is what the rules need to know about a replica's node.
type nodeState int

const (
	nodeGone         nodeState = iota // not registered
	nodeFenced                        // session expired, or registered but not yet unfenced
	nodeShuttingDown                  // in controlled shutdown: alive, but must not gain leadership
	nodeAlive
)

// liveness returns the state of a node.
type liveness func(id int32) nodeState

// canLead reports whether a node may be newly elected leader.
func canLead(live liveness, id int32) bool { return live(id) == nodeAlive }

// mayKeepLeading reports whether a current leader may stay leader.
func mayKeepLeading(live liveness, id int32) bool {
	s := live(id)
	return s == nodeAlive || s == nodeShuttingDown
}

// reconcile brings a partition in line with the nodes' states: members
// whose node is gone, fenced or shutting down leave the ISR (never emptying
// it: if every member is down the ISR stays as it was, so that one of them,
// which hold every committed record, can lead again when it returns); a
// leader that may not lead is replaced from the ISR, then from the eligible
// leader replicas (KIP-966); with preferred set, the first replica takes
// leadership back if it is in sync. It never elects an out-of-sync replica.
// It returns the new state and whether anything changed (epochs bumped).
func reconcile(p *commonv1.PartitionState, live liveness, minISR int, preferred bool) (*commonv1.PartitionState, bool) {
	out := proto.Clone(p).(*commonv1.PartitionState)
	keep := make([]int32, 0, len(p.GetIsr()))
	for _, r := range p.GetIsr() {
		if s := live(r); s == nodeAlive || (s == nodeShuttingDown && r == p.GetLeaderId() && !anyOther(p.GetIsr(), r, live)) {
			keep = append(keep, r)
		}
	}
	if len(keep) == 0 {
		keep = slices.Clone(p.GetIsr())
	}
	out.Isr = keep
	out.EligibleLeaderReplicas = adjustELR(p.GetEligibleLeaderReplicas(), p.GetIsr(), keep, p.GetReplicas(), minISR)

	leader := p.GetLeaderId()
	if !slices.Contains(keep, leader) || !mayKeepLeading(live, leader) {
		leader = -1
	}
	if pref := firstReplica(p); preferred && pref >= 0 && pref != leader && slices.Contains(keep, pref) && canLead(live, pref) {
		leader = pref
	}
	if leader < 0 {
		leader = electFrom(p.GetReplicas(), keep, live)
	}
	if leader < 0 {
		if e := electFrom(p.GetReplicas(), out.EligibleLeaderReplicas, live); e >= 0 {
			// Electing an eligible leader replica makes it the whole ISR; the
			// ISR members it replaces hold every committed record too, so they
			// stay eligible.
			leader = e
			elr := without(out.EligibleLeaderReplicas, e)
			for _, r := range out.Isr {
				if !slices.Contains(elr, r) && r != e {
					elr = append(elr, r)
				}
			}
			out.Isr = []int32{e}
			out.EligibleLeaderReplicas = elr
		}
	}
	out.LeaderId = leader
	return finish(p, out)
}

// reconcileOrUnclean is reconcile, then, when it leaves the partition
// without a leader (no in-sync or eligible replica is alive) and the topic
// allows it (unclean.leader.election.enable), an unclean election of the
// first live replica in assignment order, as Kafka's controller does: the new
// leader becomes the whole ISR and the eligible leader replicas are dropped.
// Records the new leader does not have are lost; elected reports that an
// unclean election happened so the caller can say so. The epochs are bumped
// once, relative to p.
func reconcileOrUnclean(p *commonv1.PartitionState, live liveness, minISR int, preferred, unclean bool) (next *commonv1.PartitionState, changed, elected bool) {
	next, changed = reconcile(p, live, minISR, preferred)
	if !unclean || next.GetLeaderId() >= 0 {
		return next, changed, false
	}
	leader := electFrom(p.GetReplicas(), p.GetReplicas(), live)
	if leader < 0 {
		return next, changed, false
	}
	out := proto.Clone(next).(*commonv1.PartitionState)
	out.LeaderId = leader
	out.Isr = []int32{leader}
	out.EligibleLeaderReplicas = nil
	// Compared with p, so a reconcile that already bumped the epochs (an
	// ISR shrink) does not bump them twice.
	out.LeaderEpoch, out.PartitionEpoch = p.GetLeaderEpoch(), p.GetPartitionEpoch()
	next, changed = finish(p, out)
	return next, changed, changed
}

// anyOther reports whether the ISR has a live member other than r.
func anyOther(isr []int32, r int32, live liveness) bool {
	for _, m := range isr {
		if m != r && live(m) == nodeAlive {
			return true
		}
	}
	return false
}

// electUnclean elects any live replica when the partition has no leader and
// no in-sync or eligible replica can lead. Records the new leader does not
// have are lost; the caller logs the range.
func electUnclean(p *commonv1.PartitionState, live liveness) (*commonv1.PartitionState, bool) {
	if p.GetLeaderId() >= 0 && mayKeepLeading(live, p.GetLeaderId()) {
		return p, false
	}
	leader := electFrom(p.GetReplicas(), p.GetReplicas(), live)
	if leader < 0 {
		return p, false
	}
	out := proto.Clone(p).(*commonv1.PartitionState)
	out.LeaderId = leader
	out.Isr = []int32{leader}
	out.EligibleLeaderReplicas = nil
	return finish(p, out)
}

// finish bumps the epochs if out differs from p: the leader epoch on a
// leader change, the partition epoch on any change.
func finish(p, out *commonv1.PartitionState) (*commonv1.PartitionState, bool) {
	if out.GetLeaderId() != p.GetLeaderId() {
		out.LeaderEpoch = p.GetLeaderEpoch() + 1
	}
	out.OfflineReplicas = nil // derived when metadata is served
	cmp := proto.Clone(p).(*commonv1.PartitionState)
	cmp.OfflineReplicas = nil
	if proto.Equal(cmp, out) {
		return p, false
	}
	out.PartitionEpoch = p.GetPartitionEpoch() + 1
	return out, true
}

// adjustELR applies KIP-966: replicas that leave the ISR while it is below
// min.insync.replicas become eligible leader replicas (the high watermark
// cannot advance in that state, so they hold every committed record); once
// the ISR is back at min.insync.replicas the set is cleared.
func adjustELR(elr, oldISR, newISR, replicas []int32, minISR int) []int32 {
	if len(newISR) >= minISR {
		return nil
	}
	out := slices.Clone(elr)
	for _, r := range oldISR {
		if !slices.Contains(newISR, r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	var kept []int32
	for _, r := range out {
		if !slices.Contains(newISR, r) && slices.Contains(replicas, r) {
			kept = append(kept, r)
		}
	}
	return kept
}

// electFrom returns the first replica (in assignment order, so the preferred
// leader wins ties) that is in candidates and may lead, or -1.
func electFrom(replicas, candidates []int32, live liveness) int32 {
	for _, r := range replicas {
		if slices.Contains(candidates, r) && canLead(live, r) {
			return r
		}
	}
	return -1
}

func firstReplica(p *commonv1.PartitionState) int32 {
	if len(p.GetReplicas()) == 0 {
		return -1
	}
	return p.GetReplicas()[0]
}

func without(s []int32, x int32) []int32 {
	out := make([]int32, 0, len(s))
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// applyISRChange validates a leader's proposed ISR (AlterPartition) against
// the current state and returns the new state.
func applyISRChange(cur *commonv1.PartitionState, leader int32, ch *controllerv1.PartitionChange, live liveness, minISR int) (*commonv1.PartitionState, *errs.Error) {
	tp := cur.GetTopic()
	switch {
	case ch.GetLeaderEpoch() < cur.GetLeaderEpoch():
		return nil, errs.New(errs.FencedLeaderEpoch, "%s-%d: leader epoch %d is older than the current %d", tp, cur.GetPartition(), ch.GetLeaderEpoch(), cur.GetLeaderEpoch())
	case ch.GetLeaderEpoch() > cur.GetLeaderEpoch():
		return nil, errs.New(errs.UnknownLeaderEpoch, "%s-%d: leader epoch %d is newer than the controller's %d", tp, cur.GetPartition(), ch.GetLeaderEpoch(), cur.GetLeaderEpoch())
	case cur.GetLeaderId() != leader:
		return nil, errs.New(errs.NotLeaderOrFollower, "%s-%d: node %d is not the leader (node %d is)", tp, cur.GetPartition(), leader, cur.GetLeaderId())
	case ch.GetPartitionEpoch() != cur.GetPartitionEpoch():
		return nil, errs.New(errs.InvalidUpdateVersion, "%s-%d: partition epoch %d is stale (current %d)", tp, cur.GetPartition(), ch.GetPartitionEpoch(), cur.GetPartitionEpoch())
	}
	isr := ch.GetNewIsr()
	if !slices.Contains(isr, leader) {
		return nil, errs.New(errs.InvalidRequest, "%s-%d: the new ISR %v must contain the leader %d", tp, cur.GetPartition(), isr, leader)
	}
	seen := map[int32]bool{}
	for _, r := range isr {
		if seen[r] {
			return nil, errs.New(errs.InvalidRequest, "%s-%d: replica %d appears twice in the new ISR", tp, cur.GetPartition(), r)
		}
		seen[r] = true
		if !slices.Contains(cur.GetReplicas(), r) {
			return nil, errs.New(errs.InvalidRequest, "%s-%d: %d is not a replica (replicas %v)", tp, cur.GetPartition(), r, cur.GetReplicas())
		}
		// KIP-841: a fenced or stopping node may not join the ISR.
		if !slices.Contains(cur.GetIsr(), r) && live(r) != nodeAlive {
			return nil, errs.New(errs.InvalidUpdateVersion, "%s-%d: replica %d cannot join the ISR: its node is not alive", tp, cur.GetPartition(), r)
		}
	}
	out := proto.Clone(cur).(*commonv1.PartitionState)
	out.Isr = slices.Clone(isr)
	out.EligibleLeaderReplicas = adjustELR(cur.GetEligibleLeaderReplicas(), cur.GetIsr(), out.Isr, cur.GetReplicas(), minISR)
	res, _ := finish(cur, out)
	if res == cur {
		// Nothing changed; still answer with the current state.
		return cur, nil
	}
	return res, nil
}

// startReassignment moves a partition towards target replicas: the replica
// list becomes target plus the replicas being removed, which leave once every
// new replica is in sync.
func startReassignment(rec *metastorev1.PartitionRecord, target []int32) *metastorev1.PartitionRecord {
	out := proto.Clone(rec).(*metastorev1.PartitionRecord)
	p := out.GetState()
	old := original(rec)
	var adding, removing []int32
	for _, r := range target {
		if !slices.Contains(old, r) {
			adding = append(adding, r)
		}
	}
	for _, r := range old {
		if !slices.Contains(target, r) {
			removing = append(removing, r)
		}
	}
	p.Replicas = append(slices.Clone(target), removing...)
	p.AddingReplicas, p.RemovingReplicas = adding, removing
	out.TargetReplicas = slices.Clone(target)
	p.PartitionEpoch = rec.GetState().GetPartitionEpoch() + 1
	return out
}

// original returns the replicas before the reassignment in progress (or the
// replicas when none is).
func original(rec *metastorev1.PartitionRecord) []int32 {
	var out []int32
	for _, r := range rec.GetState().GetReplicas() {
		if !slices.Contains(rec.GetState().GetAddingReplicas(), r) {
			out = append(out, r)
		}
	}
	return out
}

// finishReassignment completes a reassignment whose new replicas are all in
// sync, or cancels one (cancel set): replicas become the target (or the
// original), the ISR keeps only those, and leadership moves if the leader is
// not among them. It returns nil when there is nothing to do yet.
func finishReassignment(rec *metastorev1.PartitionRecord, live liveness, minISR int, cancel bool) *metastorev1.PartitionRecord {
	st := rec.GetState()
	if len(rec.GetTargetReplicas()) == 0 {
		return nil
	}
	final := rec.GetTargetReplicas()
	if cancel {
		final = original(rec)
	} else {
		for _, r := range st.GetAddingReplicas() {
			if !slices.Contains(st.GetIsr(), r) {
				return nil
			}
		}
	}
	out := proto.Clone(rec).(*metastorev1.PartitionRecord)
	p := out.GetState()
	p.Replicas = slices.Clone(final)
	var isr []int32
	for _, r := range st.GetIsr() {
		if slices.Contains(final, r) {
			isr = append(isr, r)
		}
	}
	p.Isr = isr
	p.AddingReplicas, p.RemovingReplicas = nil, nil
	out.TargetReplicas = nil
	if !slices.Contains(final, p.GetLeaderId()) {
		p.LeaderId = -1
	}
	// The state before this call is the base for the epochs; reconcile
	// elects a leader if the old one left and bumps them once.
	next, _ := reconcile(p, live, minISR, false)
	if next == p {
		// reconcile found nothing to do, but the replica set changed.
		next.PartitionEpoch = st.GetPartitionEpoch() + 1
		if next.GetLeaderId() != st.GetLeaderId() {
			next.LeaderEpoch = st.GetLeaderEpoch() + 1
		}
	} else {
		next.PartitionEpoch = st.GetPartitionEpoch() + 1
		if next.GetLeaderId() != st.GetLeaderId() {
			next.LeaderEpoch = st.GetLeaderEpoch() + 1
		} else {
			next.LeaderEpoch = st.GetLeaderEpoch()
		}
	}
	out.State = next
	return out
}
