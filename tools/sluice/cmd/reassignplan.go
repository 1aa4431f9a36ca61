package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// reassignPlan is a reassignment in Kafka's JSON shape, so plans move
// between kafka-reassign-partitions.sh and sluice partition reassign.
type reassignPlan struct {
	Version    int                `json:"version"`
	Partitions []plannedPartition `json:"partitions"`
}

type plannedPartition struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas"`
}

func parsePlan(b []byte) (*reassignPlan, error) {
	var p reassignPlan
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	if p.Version != 1 {
		return nil, fmt.Errorf("plan version %d: only version 1 is known", p.Version)
	}
	if len(p.Partitions) == 0 {
		return nil, errors.New("the plan moves no partition")
	}
	seen := map[string]bool{}
	for _, pp := range p.Partitions {
		key := fmt.Sprintf("%s:%d", pp.Topic, pp.Partition)
		if pp.Topic == "" || pp.Partition < 0 || len(pp.Replicas) == 0 {
			return nil, fmt.Errorf("plan entry %s: want a topic, a partition and at least one replica", key)
		}
		if seen[key] {
			return nil, fmt.Errorf("plan entry %s appears twice", key)
		}
		seen[key] = true
	}
	return &p, nil
}

// planKey orders partitions by topic, then index.
type planKey struct {
	topic     string
	partition int32
}

func sortedKeys(m map[planKey][]int32) []planKey {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].partition < keys[j].partition
	})
	return keys
}

func toPlan(m map[planKey][]int32, only []planKey) *reassignPlan {
	out := &reassignPlan{Version: 1, Partitions: []plannedPartition{}}
	for _, k := range only {
		out.Partitions = append(out.Partitions, plannedPartition{Topic: k.topic, Partition: k.partition, Replicas: m[k]})
	}
	return out
}

// proposeAssignment spreads the replicas of the given partitions over
// brokers: every broker ends up with the same number of replicas give or
// take one, and of preferred leaderships likewise, while as many replicas
// as possible stay where they are (only a broker above its share, or one
// not in brokers, gives replicas away). Replication factors are kept.
// It returns the new assignment of every partition and the partitions
// whose replica list changed, in order.
func proposeAssignment(current map[planKey][]int32, brokers []int32) (map[planKey][]int32, []planKey, error) {
	brokers = slices.Clone(brokers)
	slices.Sort(brokers)
	brokers = slices.Compact(brokers)
	if len(brokers) == 0 {
		return nil, nil, errors.New("no broker to place replicas on")
	}
	keys := sortedKeys(current)
	total := 0
	held := map[int32]int{} // replicas each target broker holds now
	for _, k := range keys {
		rf := len(current[k])
		if rf > len(brokers) {
			return nil, nil, fmt.Errorf("%s:%d has %d replicas but only %d brokers are given", k.topic, k.partition, rf, len(brokers))
		}
		total += rf
		for _, r := range current[k] {
			held[r]++
		}
	}
	// Shares: floor(total/n) each, and the remainder to the brokers that
	// hold the most now, so fewer replicas move.
	share := map[int32]int{}
	byHeld := slices.Clone(brokers)
	sort.SliceStable(byHeld, func(i, j int) bool { return held[byHeld[i]] > held[byHeld[j]] })
	for i, b := range byHeld {
		share[b] = total / len(brokers)
		if i < total%len(brokers) {
			share[b]++
		}
	}
	// Keep replicas on target brokers up to their share. A broker over its
	// share (or not a target) gives replicas away from the partitions that
	// lost the fewest so far, so no partition loses all its copies while
	// another could give one, and from those it does not lead first.
	next := map[planKey][]int32{}
	for _, k := range keys {
		next[k] = slices.Clone(current[k])
	}
	dropped := map[planKey]int{}
	for _, b := range slices.Sorted(maps.Keys(held)) {
		excess := held[b] - share[b] // share is 0 for a broker not given
		if excess <= 0 {
			continue
		}
		var from []planKey
		for _, k := range keys {
			if slices.Contains(current[k], b) {
				from = append(from, k)
			}
		}
		sort.SliceStable(from, func(i, j int) bool {
			if dropped[from[i]] != dropped[from[j]] {
				return dropped[from[i]] < dropped[from[j]]
			}
			return current[from[i]][0] != b && current[from[j]][0] == b
		})
		for _, k := range from[:excess] {
			next[k] = slices.DeleteFunc(next[k], func(r int32) bool { return r == b })
			dropped[k]++
		}
	}
	count := map[int32]int{}
	for _, k := range keys {
		for _, r := range next[k] {
			count[r]++
		}
	}
	// Fill each partition back to its replication factor from the brokers
	// furthest below their share.
	for _, k := range keys {
		for len(next[k]) < len(current[k]) {
			best := int32(-1)
			for _, b := range brokers {
				if slices.Contains(next[k], b) {
					continue
				}
				if best < 0 || share[b]-count[b] > share[best]-count[best] {
					best = b
				}
			}
			next[k] = append(next[k], best)
			count[best]++
		}
	}
	// Keeping greedily can leave a partition whose only candidates are
	// full (both its replicas dropped, one slot left on a full broker):
	// hand such surplus to a broker still below its share, preferring a
	// replica the fill just placed so nothing more moves.
	for range total {
		over, under := int32(-1), int32(-1)
		for _, b := range brokers {
			if count[b] > share[b] && over < 0 {
				over = b
			}
			if count[b] < share[b] && under < 0 {
				under = b
			}
		}
		if over < 0 || under < 0 {
			break
		}
		var pick *planKey
		for _, k := range keys {
			if !slices.Contains(next[k], over) || slices.Contains(next[k], under) {
				continue
			}
			if pick == nil || !slices.Contains(current[k], over) {
				pick = &k
				if !slices.Contains(current[k], over) {
					break
				}
			}
		}
		if pick == nil {
			break
		}
		rs := next[*pick]
		rs[slices.Index(rs, over)] = under
		count[over]--
		count[under]++
	}
	// Preferred leaders: keep the current first replica first while its
	// broker leads fewer than its ceiling share, else pick the replica
	// leading fewest; then hand leaderships from brokers above the floor
	// share to brokers below it where a partition has both as replicas.
	floor, ceil := len(keys)/len(brokers), (len(keys)+len(brokers)-1)/len(brokers)
	leads := map[int32]int{}
	for _, k := range keys {
		rs := next[k]
		at := slices.Index(rs, current[k][0])
		if at < 0 || leads[rs[at]] >= ceil {
			at = 0
			for i, r := range rs {
				if leads[r] < leads[rs[at]] {
					at = i
				}
			}
		}
		rs[0], rs[at] = rs[at], rs[0]
		leads[rs[0]]++
	}
	for range len(keys) {
		moved := false
		for _, under := range brokers {
			if leads[under] >= floor {
				continue
			}
			for _, k := range keys {
				rs := next[k]
				if at := slices.Index(rs, under); at > 0 && leads[rs[0]] > floor {
					leads[rs[0]]--
					rs[0], rs[at] = rs[at], rs[0]
					leads[under]++
					moved = true
					break
				}
			}
		}
		if !moved {
			break
		}
	}
	var changed []planKey
	for _, k := range keys {
		if !slices.Equal(next[k], current[k]) {
			changed = append(changed, k)
		}
	}
	return next, changed, nil
}

// movedReplicas counts the replicas a plan copies: new replicas not in the
// current list.
func movedReplicas(current, next map[planKey][]int32) int {
	n := 0
	for k, rs := range next {
		for _, r := range rs {
			if !slices.Contains(current[k], r) {
				n++
			}
		}
	}
	return n
}
