// Package authz decides whether an identity may perform an operation on a
// resource, with Kafka's ACL model: principal, host, operation, permission
// (Deny wins over Allow), resource type and name with literal and prefixed
// patterns, super users, implied operations, and
// allow.everyone.if.no.acl.found. One authorizer serves every listener: gRPC
// handlers and the Kafka listener call the same Check.
package authz

import (
	"context"

	"github.com/sluice-io/sluice/libs/auth"
)

// ResourceType is the kind of resource an ACL protects.
type ResourceType int

// Resource types (Kafka's, by the same names).
const (
	ResourceUnknown ResourceType = iota
	Topic
	Group
	Cluster
	TransactionalID
)

// ClusterName is the name of the one Cluster resource ("kafka-cluster", as in
// Kafka).
const ClusterName = "kafka-cluster"

// Operation is what a caller wants to do to a resource.
type Operation int

// Operations (Kafka's).
const (
	OpUnknown Operation = iota
	All
	Read
	Write
	Create
	Delete
	Alter
	Describe
	ClusterAction
	DescribeConfigs
	AlterConfigs
	IdempotentWrite
)

// Authorizer decides access. Implementations are safe for concurrent use
// and answer from memory (the ACLs a process holds), never with a remote
// call, so a check costs no more than a map lookup and a scan of the ACLs
// that match the resource.
type Authorizer interface {
	// Enabled reports whether access is checked at all. A process started
	// without an authorizer allows everything.
	Enabled() bool
	// Authorize reports whether id may perform op on the resource
	// (rt, name). Callers identified as a Sluice role (id.Role != "") are
	// the cluster itself and are allowed.
	Authorize(ctx context.Context, id auth.Identity, op Operation, rt ResourceType, name string) bool
	// AuthorizeExplicit is Authorize without
	// allow.everyone.if.no.acl.found: a caller that is neither a role
	// nor a super user needs an Allow ACL that matches. Calls between
	// the cluster's own processes use it, so that the no-ACL default
	// never lets a client act as a node.
	AuthorizeExplicit(ctx context.Context, id auth.Identity, op Operation, rt ResourceType, name string) bool
}

// AllowAll is the authorizer of a process with authorization off.
type AllowAll struct{}

// Enabled implements Authorizer.
func (AllowAll) Enabled() bool { return false }

// Authorize implements Authorizer.
func (AllowAll) Authorize(context.Context, auth.Identity, Operation, ResourceType, string) bool {
	return true
}

// AuthorizeExplicit implements Authorizer.
func (AllowAll) AuthorizeExplicit(context.Context, auth.Identity, Operation, ResourceType, string) bool {
	return true
}
