package consumer

import (
	"regexp"
	"sort"
	"time"
)

// compileRegex compiles a subscription regex anchored at both ends: Kafka
// matches the whole topic name (RE2/J's matches()), while Go's MatchString
// finds a match anywhere.
func compileRegex(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// resolveRegex lists the topics re matches, sorted.
func resolveRegex(re *regexp.Regexp, topics Topics) []string {
	if topics == nil {
		return nil
	}
	var out []string
	for _, t := range topics.Names() {
		if re.MatchString(t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// subscribedTopics returns the topics m subscribes to: its names and what
// its regex matched when last resolved.
func (g *Group) subscribedTopics(m *member) map[string]bool {
	out := make(map[string]bool, len(m.topicNames))
	for _, t := range m.topicNames {
		out[t] = true
	}
	if m.regex != "" {
		for _, t := range g.regexTopics[m.regex] {
			out[t] = true
		}
	}
	return out
}

// refreshMetadata recomputes the partition counts of the subscribed topics
// from topics and reports whether they changed (a topic appeared, vanished
// or grew): that changes what members get, so the caller bumps the group
// epoch.
func (g *Group) refreshMetadata(topics Topics) bool {
	if topics == nil {
		return false
	}
	if g.subs == nil {
		g.subs = make(map[string]bool)
		for _, m := range g.members {
			for t := range g.subscribedTopics(m) {
				g.subs[t] = true
			}
		}
	}
	next := make(map[string]int32, len(g.subs))
	for t := range g.subs {
		if n := topics.Partitions(t); n > 0 {
			next[t] = n
		}
	}
	if sameCounts(next, g.partitions) {
		return false
	}
	g.partitions = next
	return true
}

func sameCounts(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// preferredAssignor picks the server assignor for the group: the one most
// members ask for, ties going to the default, then to the smaller name
// (Kafka takes the most used one).
func (g *Group) preferredAssignor() string {
	counts := make(map[string]int)
	for _, m := range g.members {
		if m.assignor != "" {
			counts[m.assignor]++
		}
	}
	best, bestN := g.cfg.DefaultAssignor, counts[g.cfg.DefaultAssignor]
	for _, name := range sortedTopics(counts) {
		if counts[name] > bestN {
			best, bestN = name, counts[name]
		}
	}
	return best
}

// computeTarget recomputes the target assignment when the group epoch moved
// past it. Members reconcile toward it on their own heartbeats.
func (g *Group) computeTarget() {
	if g.targetEpoch == g.groupEpoch {
		return
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	spec := Spec{Partitions: make(map[string]int32, len(g.partitions))}
	for t, n := range g.partitions {
		spec.Partitions[t] = n
	}
	for _, id := range ids {
		m := g.members[id]
		spec.Members = append(spec.Members, MemberSpec{
			ID:         id,
			InstanceID: m.instanceID,
			Rack:       m.rack,
			Topics:     g.subscribedTopics(m),
			Current:    g.target[id],
		})
	}
	g.assignor = g.preferredAssignor()
	g.target = Assignors()[g.assignor].Assign(spec)
	g.targetEpoch = g.groupEpoch
}

// TopicsChanged tells the group that a topic was created, deleted or grew.
// It re-resolves regex subscriptions and the subscribed topics' partition
// counts, and bumps the group epoch (recomputing the target) if that changes
// what members get.
func (g *Group) TopicsChanged(topics Topics) {
	changed := false
	for expr := range g.regexTopics {
		re, err := compileRegex(expr)
		if err != nil {
			continue // Only valid expressions are ever stored.
		}
		next := resolveRegex(re, topics)
		if !equalStrings(next, g.regexTopics[expr]) {
			g.regexTopics[expr] = next
			g.subs = nil
			changed = true
		}
	}
	if g.refreshMetadata(topics) || changed {
		g.groupEpoch++
	}
	g.computeTarget()
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Expire removes the members whose session ended, and those that did not
// revoke partitions within their rebalance timeout (they are fenced: their
// partitions become free for the new owners). It returns their ids, sorted.
func (g *Group) Expire(now time.Time) []string {
	var gone []string
	for id, m := range g.members {
		if !m.sessionDeadline.After(now) || (!m.revokeDeadline.IsZero() && !m.revokeDeadline.After(now)) {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		g.removeMember(g.members[id])
	}
	if len(gone) > 0 {
		// The partition counts stay as last seen: Expire has no topic view.
		g.groupEpoch++
		g.computeTarget()
	}
	return gone
}

// NextDeadline returns the earliest time Expire has work, or the zero time
// if no member has a deadline.
func (g *Group) NextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, m := range g.members {
		consider(m.sessionDeadline)
		consider(m.revokeDeadline)
	}
	return next
}
