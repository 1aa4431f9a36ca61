package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// One process with every role: healthy, every service listed by reflection,
// bad input refused with InvalidArgument and the offending field, and an RPC
// that is not built yet answers Unimplemented.
func TestAllRolesInOneProcess(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Combined: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := cluster.Client(t, c).Conn(c.Processes()[0].Addr)
	require.NoError(t, err)

	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "sluice.controller.v1.ControllerService"} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus(), svc)
	}

	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}))
	msg, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range msg.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.Subset(t, names, []string{
		"sluice.controller.v1.ControllerService",
		"sluice.storage.v1.StorageService",
		"sluice.replication.v1.ReplicationService",
		"sluice.group.v1.GroupCoordinatorService",
		"sluice.txn.v1.TransactionCoordinatorService",
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
	})
	require.NoError(t, stream.CloseSend())

	_, err = storagev1.NewStorageServiceClient(conn).ListOffsets(ctx, &storagev1.ListOffsetsRequest{
		Partitions: []*storagev1.ListOffsetsPartition{{Topic: "orders", Partition: -1}},
	})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	e := errs.From(err)
	require.Equal(t, errs.InvalidRequest, e.Code)
	require.Contains(t, e.Message, "partitions[0].partition: must not be negative, got -1")
	require.Contains(t, e.Message, "partitions[0].spec: must be EARLIEST, LATEST, TIMESTAMP or MAX_TIMESTAMP")

	// The group coordinator serves in the same process: a fresh cluster
	// has no groups, and a group id it cannot hold is refused by name.
	lg, err := groupv1.NewGroupCoordinatorServiceClient(conn).ListGroups(ctx, &groupv1.ListGroupsRequest{})
	require.NoError(t, err)
	require.Empty(t, lg.GetGroups())
	fc, err := groupv1.NewGroupCoordinatorServiceClient(conn).FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{Keys: []string{""}})
	require.NoError(t, err)
	require.Equal(t, errs.InvalidGroupID, errs.FromProto(fc.GetCoordinators()[0].GetError()).Code)
}

// Three controllers form one etcd quorum with exactly one active controller;
// three storage nodes run as their own processes. The harness can kill and
// restart any process.
func TestThreeControllersThreeStorageNodes(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 3, StorageNodes: 3})
	require.Len(t, c.Processes(), 6)
	pids := map[int]bool{}
	for _, p := range c.Processes() {
		require.True(t, p.Running(), p.Name)
		pids[p.PID()] = true
	}
	require.Len(t, pids, 6, "every node is its own process")

	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var active, etcdLeaders int
	require.Eventually(t, func() bool {
		resp, err := cl.DescribeCluster(ctx)
		if err != nil || resp.GetControllerId() < 0 {
			return false
		}
		active, etcdLeaders = 0, 0
		members := map[string]bool{}
		for _, m := range resp.GetControllers() {
			members[m.GetEtcdMember()] = true
			if m.GetActive() {
				active++
			}
			if m.GetEtcdLeader() {
				etcdLeaders++
			}
		}
		return len(resp.GetControllers()) == 3 && len(members) == 3 && active == 1 && etcdLeaders == 1
	}, 30*time.Second, 200*time.Millisecond, "want 3 controllers, 3 etcd members, 1 active controller, 1 etcd leader; have %d active, %d leaders", active, etcdLeaders)

	// SIGKILL and restart a storage node; it comes back healthy.
	s2 := c.Process("storage-2")
	require.NoError(t, s2.Kill())
	require.False(t, s2.Running())
	require.NoError(t, s2.Start())
	require.NoError(t, s2.WaitHealthy(ctx, 60*time.Second))
}
