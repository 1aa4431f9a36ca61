package topicconfig

import (
	"math"
	"slices"
	"sort"
	"strconv"
)

// ReplicationThrottledRate is the bytes per second a node's leaders may send
// to replicas that a reassignment is adding (Kafka's
// leader.replication.throttled.rate). It is cluster-wide: every node applies
// it to its own traffic with a token bucket of its own (libs/replica). Unset,
// reassignment traffic is not throttled.
const ReplicationThrottledRate = "leader.replication.throttled.rate"

// clusterDefs are dynamic cluster configs that are no topic's default: they
// are set on the BROKER resource like the defaults, under their own name.
var clusterDefs = []Def{
	// Kafka accepts 0, which would stall every move forever; a throttle is
	// removed by deleting it, so the smallest rate is 1.
	{Name: ReplicationThrottledRate, BrokerName: ReplicationThrottledRate, Kind: Long, Default: strconv.FormatInt(maxLong, 10), Min: 1, Max: maxLong,
		Doc: "Bytes per second each node's leaders may send to replicas being added by a partition reassignment (follower fetches of ordinary followers are never throttled). Delete it to remove the throttle."},
}

// ClusterOnly returns the dynamic cluster configs that are no topic's
// default, sorted by name.
func ClusterOnly() []Def {
	out := slices.Clone(clusterDefs)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ThrottledRate returns the reassignment throttle in bytes per second from
// the cluster-wide configs, or 0 when none is set.
func ThrottledRate(cluster map[string]string) float64 {
	v, ok := cluster[ReplicationThrottledRate]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n == math.MaxInt64 {
		// The controller validated it; an unreadable value is treated as
		// no throttle rather than a stalled move.
		return 0
	}
	return float64(n)
}
