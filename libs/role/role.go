// Package role names Sluice's roles and the aggregate targets that expand to
// several of them. A process runs a set of roles (sluiced --roles=...); every
// role can run alone, so each scales on its own, and "all" runs every role in
// one process.
package role

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Role is one unit of functionality that a process can run.
type Role string

// The five roles.
const (
	// Controller hosts cluster metadata in etcd, elects partition leaders and
	// manages node membership.
	Controller Role = "controller"
	// StorageNode owns partition replicas on local disk and serves produce
	// and fetch.
	StorageNode Role = "storage-node"
	// Replication keeps follower replicas in sync with their leaders.
	Replication Role = "replication"
	// GroupCoordinator manages consumer groups and committed offsets.
	GroupCoordinator Role = "group-coordinator"
	// TransactionCoordinator manages producer ids and transactions.
	TransactionCoordinator Role = "transaction-coordinator"
)

// All lists every role in start order: a role only depends on roles before it
// when they run in the same process.
var All = []Role{Controller, StorageNode, Replication, GroupCoordinator, TransactionCoordinator}

// Aggregate targets expand to several roles.
var aggregates = map[string][]Role{
	"all":          All,
	"data":         {StorageNode, Replication},
	"coordinators": {GroupCoordinator, TransactionCoordinator},
}

// Set is a set of roles, kept in All's order.
type Set []Role

// Parse reads a comma-separated list of roles and aggregate targets, such as
// "all" or "controller,storage-node" or "data,coordinators".
func Parse(s string) (Set, error) {
	seen := map[Role]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if agg, ok := aggregates[part]; ok {
			for _, r := range agg {
				seen[r] = true
			}
			continue
		}
		r := Role(part)
		if !slices.Contains(All, r) {
			return nil, fmt.Errorf("unknown role %q: want one or more of %s", part, strings.Join(Names(), ", "))
		}
		seen[r] = true
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no role given: want one or more of %s", strings.Join(Names(), ", "))
	}
	var out Set
	for _, r := range All {
		if seen[r] {
			out = append(out, r)
		}
	}
	return out, nil
}

// Names lists every role and aggregate target, for help texts.
func Names() []string {
	var out []string
	for _, r := range All {
		out = append(out, string(r))
	}
	var aggs []string
	for a := range aggregates {
		aggs = append(aggs, a)
	}
	sort.Strings(aggs)
	return append(out, aggs...)
}

// Has reports whether the set contains r.
func (s Set) Has(r Role) bool { return slices.Contains(s, r) }

// String renders the set as a comma-separated list.
func (s Set) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = string(r)
	}
	return strings.Join(parts, ",")
}

// Without returns the set without r.
func (s Set) Without(r Role) Set {
	var out Set
	for _, x := range s {
		if x != r {
			out = append(out, x)
		}
	}
	return out
}

// Strings returns the roles as strings.
func (s Set) Strings() []string {
	out := make([]string, len(s))
	for i, r := range s {
		out[i] = string(r)
	}
	return out
}

// Set implements flag.Value.
func (s *Set) Set(v string) error {
	parsed, err := Parse(v)
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}
