package kafka

import (
	"context"

	"github.com/sluice-io/sluice/libs/authz"
)

// Kafka's AclOperation numbers, the bits of an authorized-operations field.
const (
	aclRead            = 3
	aclWrite           = 4
	aclCreate          = 5
	aclDelete          = 6
	aclAlter           = 7
	aclDescribe        = 8
	aclClusterAction   = 9
	aclDescribeConfigs = 10
	aclAlterConfigs    = 11
	aclIdempotentWrite = 12
	aclCreateTokens    = 13
	aclDescribeTokens  = 14
)

// The operations each resource type supports, with their bits.
var (
	topicOps = []opBit{{authz.Read, aclRead}, {authz.Write, aclWrite}, {authz.Create, aclCreate}, {authz.Delete, aclDelete},
		{authz.Alter, aclAlter}, {authz.Describe, aclDescribe}, {authz.DescribeConfigs, aclDescribeConfigs}, {authz.AlterConfigs, aclAlterConfigs}}
	clusterOps = []opBit{{authz.Create, aclCreate}, {authz.Alter, aclAlter}, {authz.Describe, aclDescribe},
		{authz.ClusterAction, aclClusterAction}, {authz.DescribeConfigs, aclDescribeConfigs}, {authz.AlterConfigs, aclAlterConfigs},
		{authz.IdempotentWrite, aclIdempotentWrite}}
	groupOps = []opBit{{authz.Read, aclRead}, {authz.Describe, aclDescribe}, {authz.Delete, aclDelete}}
)

type opBit struct {
	op  authz.Operation
	bit uint
}

// Authorized-operations fields with authorization off: every operation the
// resource type supports (Kafka without an authorizer reports the same).
const (
	allTopicOps   int32 = 1<<aclRead | 1<<aclWrite | 1<<aclCreate | 1<<aclDelete | 1<<aclAlter | 1<<aclDescribe | 1<<aclDescribeConfigs | 1<<aclAlterConfigs
	allClusterOps int32 = 1<<aclCreate | 1<<aclAlter | 1<<aclDescribe | 1<<aclClusterAction | 1<<aclDescribeConfigs | 1<<aclAlterConfigs |
		1<<aclIdempotentWrite | 1<<aclCreateTokens | 1<<aclDescribeTokens
	allGroupOps int32 = 1<<aclRead | 1<<aclDescribe | 1<<aclDelete
)

// AuthorizedOperations is the authorized-operations field (Metadata,
// DescribeCluster, DescribeGroups; KIP-430) of the caller in ctx on the
// resource (rt, name): one bit per operation it may perform, numbered as
// Kafka's AclOperation.
func AuthorizedOperations(ctx context.Context, a authz.Authorizer, rt authz.ResourceType, name string) int32 {
	var ops []opBit
	var all int32
	switch rt {
	case authz.Topic:
		ops, all = topicOps, allTopicOps
	case authz.Cluster:
		ops, all = clusterOps, allClusterOps
	case authz.Group:
		ops, all = groupOps, allGroupOps
	default:
		return 0
	}
	if a == nil || !a.Enabled() {
		return all
	}
	var out int32
	for _, o := range ops {
		if authz.Allowed(ctx, a, o.op, rt, name) {
			out |= 1 << o.bit
		}
	}
	return out
}
