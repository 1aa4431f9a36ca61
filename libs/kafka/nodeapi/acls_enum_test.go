package nodeapi

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/authz"
)

// The enum tables give Kafka's wire numbers (Kafka's AclOperation,
// AclPermissionType, PatternType and ResourceType codes) both ways, and
// values without a row map to unknown.
func TestACLEnumTables(t *testing.T) {
	ops := map[authz.Operation]int8{authz.All: 2, authz.Read: 3, authz.Write: 4, authz.Create: 5, authz.Delete: 6, authz.Alter: 7,
		authz.Describe: 8, authz.ClusterAction: 9, authz.DescribeConfigs: 10, authz.AlterConfigs: 11, authz.IdempotentWrite: 12}
	for op, wire := range ops {
		require.Equal(t, kmsg.ACLOperation(wire), operations.kafka(op), "%s", op)
		require.Equal(t, op, operations.authz(kmsg.ACLOperation(wire)), "%d", wire)
	}
	require.Equal(t, authz.OpUnknown, operations.authz(kmsg.ACLOperationAny), "ANY is a filter, not an operation")
	require.Equal(t, authz.OpUnknown, operations.authz(13))

	rts := map[authz.ResourceType]int8{authz.Topic: 2, authz.Group: 3, authz.Cluster: 4, authz.TransactionalID: 5}
	for rt, wire := range rts {
		require.Equal(t, kmsg.ACLResourceType(wire), resourceTypes.kafka(rt))
		require.Equal(t, rt, resourceTypes.authz(kmsg.ACLResourceType(wire)))
	}
	require.Equal(t, authz.ResourceUnknown, resourceTypes.authz(kmsg.ACLResourceTypeUser), "USER resources are refused")

	require.Equal(t, kmsg.ACLPermissionType(3), permissions.kafka(authz.Allow))
	require.Equal(t, kmsg.ACLPermissionType(2), permissions.kafka(authz.Deny))
	require.Equal(t, authz.Deny, permissions.authz(2))
	require.Equal(t, authz.PermissionUnknown, permissions.authz(kmsg.ACLPermissionTypeAny))

	require.Equal(t, kmsg.ACLResourcePatternType(3), patterns.kafka(authz.Literal))
	require.Equal(t, kmsg.ACLResourcePatternType(4), patterns.kafka(authz.Prefixed))
	require.Equal(t, authz.Prefixed, patterns.authz(4))
	require.Equal(t, authz.PatternUnknown, patterns.authz(kmsg.ACLResourcePatternTypeMatch))
}
