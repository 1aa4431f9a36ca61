package app

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	replicationv1 "github.com/sluice-io/sluice/gen/go/sluice/replication/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// A call is credited to the role that serves it in this process, as its
// health says: the replication API belongs to the storage node that
// registers it, also in a process without the replication role.
func TestRoleOfFollowsTheServingRole(t *testing.T) {
	method := func(svc string) string { return "/" + svc + "/Any" }
	for _, roles := range []string{"storage-node", "storage-node,replication"} {
		var cfg Config
		cfg.RegisterFlags(flag.NewFlagSet("sluiced", flag.ContinueOnError))
		set, err := role.Parse(roles)
		require.NoError(t, err)
		cfg.Roles = set
		srv := grpcx.NewServer(cfg.GRPC, grpcx.ServerOptions{Logger: log.Discard()})
		n := &node{cfg: cfg, logger: log.Discard(), srv: srv, cache: metadata.NewCache(), pool: wire.NewPool(wire.ClientOptions{})}
		served := serviceRoles{}
		for _, r := range set {
			served.add(r, n.newRole(r))
		}
		require.Equal(t, "storage-node", served.RoleOf(method(replicationv1.ReplicationService_ServiceDesc.ServiceName)), roles)
		require.Equal(t, "storage-node", served.RoleOf(method(storagev1.StorageService_ServiceDesc.ServiceName)), roles)
		require.Equal(t, telemetry.Process, served.RoleOf(method(metadatav1.MetadataService_ServiceDesc.ServiceName)), roles)
		require.Equal(t, telemetry.Process, served.RoleOf("/sluice.controller.v1.ControllerService/CreateTopics"),
			"%s: a role this process does not run serves nothing here", roles)
	}
}

func TestServiceName(t *testing.T) {
	require.Equal(t, "sluice-storage-node", ServiceName(role.Set{role.StorageNode}))
	require.Equal(t, "sluice-controller", ServiceName(role.Set{role.Controller}))
	require.Equal(t, "sluiced", ServiceName(role.Set{role.StorageNode, role.Replication}))
	require.Equal(t, "sluiced", ServiceName(role.All))
}
