package authz

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/libs/auth"
)

// Config configures an ACLAuthorizer.
type Config struct {
	// SuperUsers may do everything, whatever the ACLs say (Kafka's
	// super.users), as principals "User:admin".
	SuperUsers []string
	// AllowEveryoneIfNoACLFound allows a request on a resource that no ACL
	// names at all (Kafka's allow.everyone.if.no.acl.found). Once one ACL
	// matches the resource, only the ACLs decide.
	AllowEveryoneIfNoACLFound bool
	// Logger receives the audit lines of denied checks (see Check). Nil
	// discards them.
	Logger *slog.Logger
}

// ACLAuthorizer is the authorizer of a process with authorization on: it
// decides from the ACL set it holds, which the process replaces whenever
// the cluster metadata brings a new one (SetACLs). Safe for concurrent
// use; Authorize takes no lock.
type ACLAuthorizer struct {
	superUsers map[string]bool
	allowIfNo  bool
	logger     *slog.Logger
	idx        atomic.Pointer[index]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced by SetACLs
}

// New returns an authorizer with no ACLs: it allows super users and role
// identities, and everyone else only if AllowEveryoneIfNoACLFound.
func New(cfg Config) *ACLAuthorizer {
	a := &ACLAuthorizer{superUsers: map[string]bool{}, allowIfNo: cfg.AllowEveryoneIfNoACLFound, logger: cfg.Logger,
		changed: make(chan struct{})}
	for _, u := range cfg.SuperUsers {
		a.superUsers[u] = true
	}
	if a.logger == nil {
		a.logger = slog.New(slog.DiscardHandler)
	}
	a.idx.Store(newIndex(nil, 0))
	return a
}

// SetACLs replaces the ACL set with acls, read at metadata revision rev.
// Checks that start after SetACLs returns see the new set. The caller keeps
// ownership of acls; invalid entries are kept (they only ever match what
// their fields say).
func (a *ACLAuthorizer) SetACLs(acls []ACL, rev int64) {
	ix := newIndex(acls, rev)
	a.mu.Lock()
	ix.gen = a.idx.Load().gen + 1
	a.idx.Store(ix)
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// Generation counts the ACL sets the authorizer has held: it changes
// whenever SetACLs replaces the set, even with an equal one. One atomic
// load, for callers that re-decide when the set changed.
func (a *ACLAuthorizer) Generation() uint64 { return a.idx.Load().gen }

// Changed returns a channel closed at the next SetACLs.
func (a *ACLAuthorizer) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// ACLs returns the ACL set the authorizer decides from, and the metadata
// revision it was read at.
func (a *ACLAuthorizer) ACLs() ([]ACL, int64) {
	ix := a.idx.Load()
	return append([]ACL(nil), ix.all...), ix.rev
}

// Enabled implements Authorizer: an ACLAuthorizer always checks.
func (a *ACLAuthorizer) Enabled() bool { return true }

// Authorize implements Authorizer with Kafka's rules, in order:
//  1. role identities (the cluster's own processes) and super users are
//     allowed;
//  2. a Deny ACL whose principal (or User:*), host (or *) and operation (or
//     All) match denies;
//  3. an Allow ACL that matches allows, where Allow Read, Write, Delete or
//     Alter also allow Describe and Allow AlterConfigs also allows
//     DescribeConfigs (implied operations, never applied to Deny);
//  4. with no ACL on the resource at all, AllowEveryoneIfNoACLFound decides;
//     otherwise the request is denied.
//
// An ACL is on the resource when its type is rt and its name is the name
// (literal), "*" (literal), or a prefix of the name (prefixed).
func (a *ACLAuthorizer) Authorize(_ context.Context, id auth.Identity, op Operation, rt ResourceType, name string) bool {
	return a.authorize(id, op, rt, name, a.allowIfNo)
}

// AuthorizeExplicit implements Authorizer: Authorize without the
// no-ACL-found default, so only a role identity, a super user or a
// matching Allow ACL (and no matching Deny) allows.
func (a *ACLAuthorizer) AuthorizeExplicit(_ context.Context, id auth.Identity, op Operation, rt ResourceType, name string) bool {
	return a.authorize(id, op, rt, name, false)
}

func (a *ACLAuthorizer) authorize(id auth.Identity, op Operation, rt ResourceType, name string, allowIfNo bool) bool {
	if id.Role != "" || a.superUsers[id.Principal.String()] {
		return true
	}
	ix := a.idx.Load()
	principal := id.Principal.String()
	// The caller's address in canonical form: an IPv4-mapped IPv6
	// address is its IPv4 address. An unparsable host matches only "*".
	from, _ := netip.ParseAddr(id.Host)
	from = from.Unmap()
	found, allowed := false, false
	decide := func(acls []entry) bool { // returns true on a matching Deny
		for i := range acls {
			acl := &acls[i]
			found = true
			if acl.Principal != principal && acl.Principal != WildcardPrincipal {
				continue
			}
			if !acl.anyHost && (!acl.addr.IsValid() || acl.addr != from) {
				continue
			}
			if acl.Permission == Deny {
				if acl.Operation == op || acl.Operation == All {
					return true
				}
				continue
			}
			if acl.Permission == Allow && implies(acl.Operation, op) {
				allowed = true
			}
		}
		return false
	}
	byName := ix.literal[rt]
	if decide(byName[name]) {
		return false
	}
	if name != Wildcard && decide(byName[Wildcard]) {
		return false
	}
	if prefixes := ix.prefixed[rt]; len(prefixes) > 0 {
		for i := 1; i <= len(name); i++ {
			if decide(prefixes[name[:i]]) {
				return false
			}
		}
	}
	if !found {
		return allowIfNo
	}
	return allowed
}

// implies reports whether an Allow ACL for granted allows op.
func implies(granted, op Operation) bool {
	if granted == op || granted == All {
		return true
	}
	switch op {
	case Describe:
		return granted == Read || granted == Write || granted == Delete || granted == Alter
	case DescribeConfigs:
		return granted == AlterConfigs
	}
	return false
}

// entry is an ACL with its host parsed: anyHost for "*", else addr in
// canonical form (invalid when the host is not an address: it matches
// nothing).
type entry struct {
	ACL
	anyHost bool
	addr    netip.Addr
}

// index is one immutable ACL set, looked up by resource type and name.
type index struct {
	gen      uint64 // the SetACLs that stored it, counting from 0 (New)
	rev      int64
	all      []ACL
	literal  map[ResourceType]map[string][]entry
	prefixed map[ResourceType]map[string][]entry
}

func newIndex(acls []ACL, rev int64) *index {
	ix := &index{
		rev:      rev,
		all:      append([]ACL(nil), acls...),
		literal:  map[ResourceType]map[string][]entry{},
		prefixed: map[ResourceType]map[string][]entry{},
	}
	for _, acl := range ix.all {
		m := ix.literal
		if acl.Pattern == Prefixed {
			m = ix.prefixed
		} else if acl.Pattern != Literal {
			continue
		}
		if m[acl.ResourceType] == nil {
			m[acl.ResourceType] = map[string][]entry{}
		}
		e := entry{ACL: acl, anyHost: acl.Host == Wildcard}
		if addr, err := netip.ParseAddr(acl.Host); err == nil {
			e.addr = addr.Unmap()
		}
		m[acl.ResourceType][acl.Name] = append(m[acl.ResourceType][acl.Name], e)
	}
	return ix
}
