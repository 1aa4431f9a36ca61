package authz

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluice-io/sluice/libs/auth"
)

// Permission says whether an ACL allows or denies.
type Permission int

// Permissions. A Deny that matches a request wins over every Allow.
const (
	PermissionUnknown Permission = iota
	Allow
	Deny
)

// PatternType says how an ACL's resource name matches a resource.
type PatternType int

// Pattern types (Kafka's ResourcePatternType).
const (
	PatternUnknown PatternType = iota
	// Literal matches the exact name, or every name when the ACL's name is
	// Wildcard.
	Literal
	// Prefixed matches every name that starts with the ACL's name.
	Prefixed
)

// Wildcard is the resource name of a literal ACL that matches every
// resource of its type, and the host that matches every host.
const Wildcard = "*"

// WildcardPrincipal is the principal of an ACL that matches every principal.
const WildcardPrincipal = "User:*"

// ACL is one access control entry: Principal may (Allow) or may not (Deny)
// perform Operation on the resources of ResourceType whose names match Name
// under Pattern, when calling from Host.
type ACL struct {
	Principal    string // "User:alice", or WildcardPrincipal
	Host         string // an IP address, or Wildcard
	Operation    Operation
	Permission   Permission
	ResourceType ResourceType
	Name         string
	Pattern      PatternType
}

// String writes the ACL the way the CLI lists it.
func (a ACL) String() string {
	return fmt.Sprintf("%s %s %s on %s %s %q from host %s", a.Principal, a.Permission, a.Operation, a.ResourceType, a.Pattern, a.Name, a.Host)
}

// CanonicalHost returns the form ACL hosts are stored and compared in:
// "*" stays "*"; an IP address is parsed, an IPv4-mapped IPv6 address
// becomes its IPv4 address (::ffff:10.0.0.1 is 10.0.0.1, as a dual-stack
// listener may report an IPv4 caller either way) and IPv6 is written in
// its canonical lower-case, zero-compressed form (RFC 5952). ok is false
// when host is neither.
func CanonicalHost(host string) (canonical string, ok bool) {
	if host == Wildcard {
		return host, true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host, false
	}
	return addr.Unmap().String(), true
}

// Canonical returns a with its host in canonical form (CanonicalHost); a
// host that is not an address is left as it is, for Validate to report.
func (a ACL) Canonical() ACL {
	a.Host, _ = CanonicalHost(a.Host)
	return a
}

// Validate reports the first field of a that a binding may not have, as a
// field name and a sentence. Kafka's rules: a known resource type,
// operation, permission and pattern type; a principal "User:Name" (the
// type is case-sensitive, as Kafka compares it; Sluice authenticates no
// other type, so an ACL for another would never match); a host that is
// "*" or an IP address; a non-empty name; the cluster resource is
// named "kafka-cluster" and is literal; "*" is only a literal name; the
// operation applies to the resource type.
func (a ACL) Validate() (field, problem string) {
	if a.ResourceType < Topic || a.ResourceType > TransactionalID {
		return "resource_type", "must be one of Topic, Group, Cluster or TransactionalId"
	}
	if a.Pattern != Literal && a.Pattern != Prefixed {
		return "pattern_type", "must be LITERAL or PREFIXED"
	}
	if a.Name == "" {
		return "resource_name", "must not be empty"
	}
	if a.ResourceType == Cluster && (a.Name != ClusterName || a.Pattern != Literal) {
		return "resource_name", fmt.Sprintf("the cluster resource is the literal name %q", ClusterName)
	}
	if a.Pattern == Prefixed && a.Name == Wildcard {
		return "resource_name", `"*" matches every name only as a LITERAL pattern; a PREFIXED "*" would match names starting with '*'`
	}
	p, err := auth.ParsePrincipal(a.Principal)
	if err != nil || a.Principal == Wildcard {
		return "principal", fmt.Sprintf("%q is not a principal: want Type:Name such as User:alice, or User:* for everyone", a.Principal)
	}
	if p.Type != auth.UserType {
		hint := ""
		if strings.EqualFold(p.Type, auth.UserType) {
			hint = fmt.Sprintf(" (principal types are case-sensitive, as in Kafka: write %s:%s)", auth.UserType, p.Name)
		}
		return "principal", fmt.Sprintf("%q: the principal type must be %q, the only type Sluice authenticates%s", a.Principal, auth.UserType, hint)
	}
	if _, ok := CanonicalHost(a.Host); !ok {
		return "host", fmt.Sprintf("%q is neither \"*\" nor an IP address (ACLs match the caller's address, not host names)", a.Host)
	}
	if a.Permission != Allow && a.Permission != Deny {
		return "permission", "must be ALLOW or DENY"
	}
	if a.Operation < All || a.Operation > IdempotentWrite {
		return "operation", "must be a known operation"
	}
	if !appliesTo(a.Operation, a.ResourceType) {
		return "operation", fmt.Sprintf("%s does not apply to a %s (it applies to %s)", a.Operation, a.ResourceType, opsOf(a.ResourceType))
	}
	return "", ""
}

// resourceOps lists the operations each resource type supports (Kafka's
// table in "Authorization and ACLs"), All aside.
var resourceOps = map[ResourceType][]Operation{
	Topic:           {Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs},
	Group:           {Read, Delete, Describe},
	Cluster:         {Create, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite},
	TransactionalID: {Write, Describe},
}

func appliesTo(op Operation, rt ResourceType) bool {
	if op == All {
		return true
	}
	for _, o := range resourceOps[rt] {
		if o == op {
			return true
		}
	}
	return false
}

func opsOf(rt ResourceType) string {
	names := []string{All.String()}
	for _, o := range resourceOps[rt] {
		names = append(names, o.String())
	}
	return strings.Join(names, ", ")
}

// Compare orders ACLs by resource type, name, pattern type, principal,
// host, operation and permission (the order listings use).
func Compare(a, b ACL) int {
	return cmp.Or(
		cmp.Compare(a.ResourceType, b.ResourceType),
		strings.Compare(a.Name, b.Name),
		cmp.Compare(a.Pattern, b.Pattern),
		strings.Compare(a.Principal, b.Principal),
		strings.Compare(a.Host, b.Host),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Permission, b.Permission),
	)
}

// Filter selects ACLs, for listing and deleting them. A zero field matches
// anything: ResourceUnknown, OpUnknown, PermissionUnknown and
// PatternUnknown, and empty strings. Fields match exactly (a filter with
// Name "orders" does not select a prefixed ACL "ord").
type Filter struct {
	Principal    string
	Host         string
	Operation    Operation
	Permission   Permission
	ResourceType ResourceType
	Name         string
	Pattern      PatternType
}

// Matches reports whether f selects a. Hosts compare in canonical form
// (CanonicalHost).
func (f Filter) Matches(a ACL) bool {
	return (f.Principal == "" || f.Principal == a.Principal) &&
		(f.Host == "" || sameHost(f.Host, a.Host)) &&
		(f.Operation == OpUnknown || f.Operation == a.Operation) &&
		(f.Permission == PermissionUnknown || f.Permission == a.Permission) &&
		(f.ResourceType == ResourceUnknown || f.ResourceType == a.ResourceType) &&
		(f.Name == "" || f.Name == a.Name) &&
		(f.Pattern == PatternUnknown || f.Pattern == a.Pattern)
}

// IsEmpty reports whether f matches every ACL.
func (f Filter) IsEmpty() bool { return f == Filter{} }

func sameHost(x, y string) bool {
	if x == y {
		return true
	}
	cx, _ := CanonicalHost(x)
	cy, _ := CanonicalHost(y)
	return cx == cy
}
