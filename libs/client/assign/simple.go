package assign

// Range returns Kafka's "range" assignor: per topic, the members subscribed
// to it in Kafka's member order (static members by instance id, then the
// rest by member id) each take a contiguous range of partitions, and the
// first n%m of them take one extra. Rack-aware range assignment (KIP-881)
// needs partition racks, which Assign does not have, so racks are ignored,
// as Kafka does when it knows no partition rack.
func Range() Assignor { return rangeAssignor{} }

type rangeAssignor struct{}

func (rangeAssignor) Name() string                { return rangeName }
func (rangeAssignor) Protocol() RebalanceProtocol { return Eager }

func (rangeAssignor) Assign(members []Member, partitions map[string]int32) map[string]map[string][]int32 {
	g := newGroup(members, partitions)
	plan := g.emptyPlan()
	for _, t := range g.topics {
		consumers := g.consumers[t]
		n, m := int(g.counts[t]), len(consumers)
		per, extra := n/m, n%m
		next := 0
		for i, c := range consumers {
			size := per
			if i < extra {
				size++
			}
			if size == 0 {
				continue
			}
			ps := make([]int32, size)
			for j := range ps {
				ps[j] = int32(next + j)
			}
			next += size
			plan[g.members[c].ID][t] = ps
		}
	}
	return plan
}

// RoundRobin returns Kafka's "roundrobin" assignor: every partition of every
// subscribed topic, sorted by topic then partition, goes to the next member
// in Kafka's member order that subscribes to its topic, the walk continuing
// from where the previous partition left it.
func RoundRobin() Assignor { return roundRobinAssignor{} }

type roundRobinAssignor struct{}

func (roundRobinAssignor) Name() string                { return roundRobinName }
func (roundRobinAssignor) Protocol() RebalanceProtocol { return Eager }

func (roundRobinAssignor) Assign(members []Member, partitions map[string]int32) map[string]map[string][]int32 {
	g := newGroup(members, partitions)
	plan := g.emptyPlan()
	subscribed := make([]map[string]bool, len(g.members))
	for i, sub := range g.subs {
		subscribed[i] = make(map[string]bool, len(sub))
		for _, t := range sub {
			subscribed[i][t] = true
		}
	}
	next := 0
	for _, t := range g.topics {
		for p := int32(0); p < g.counts[t]; p++ {
			// Some member subscribes to t (g.topics holds only such
			// topics), so the walk ends within one turn.
			for !subscribed[next][t] {
				next = (next + 1) % len(g.members)
			}
			id := g.members[next].ID
			plan[id][t] = append(plan[id][t], p)
			next = (next + 1) % len(g.members)
		}
	}
	return plan
}
