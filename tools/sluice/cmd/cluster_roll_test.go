package cmd

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

func broker(id int32, port int32, roles ...string) *commonv1.Broker {
	return &commonv1.Broker{Id: id, Roles: roles, Endpoints: []*commonv1.Endpoint{
		{Name: "grpc", Host: "127.0.0.1", Port: port}, {Name: "kafka", Host: "127.0.0.1", Port: port + 4}}}
}

// The roll restarts storage nodes, then replication workers, then
// coordinators, then controllers, and the active controller last, whatever
// order the registry lists them in; a process with the controller role among
// others goes with the controllers.
func TestRollPlanOrder(t *testing.T) {
	resp := &controllerv1.DescribeClusterResponse{
		ControllerId: 2,
		Controllers: []*controllerv1.ControllerMember{
			{NodeId: 2, Address: "127.0.0.1:9020"},
			{NodeId: 1, Address: "127.0.0.1:9010"},
			{NodeId: 3, Address: "127.0.0.1:9030"},
		},
		Brokers: []*commonv1.Broker{
			broker(3, 9030, "storage-node", "replication"),
			broker(9, 9090, "group-coordinator"),
			broker(5, 9050, "storage-node", "replication", "group-coordinator"),
			broker(7, 9070, "replication"),
			broker(4, 9040, "storage-node"),
			broker(8, 9080, "transaction-coordinator"),
		},
	}
	plan := rollPlan(resp)
	var order []int32
	var phases []string
	for _, s := range plan {
		order = append(order, s.NodeID)
		phases = append(phases, s.Phase)
	}
	require.Equal(t, []int32{4, 5, 7, 8, 9, 1, 3, 2}, order)
	require.Equal(t, []string{"storage-node", "storage-node", "replication", "coordinator", "coordinator", "controller", "controller", "controller"}, phases)
	last := plan[len(plan)-1]
	require.True(t, last.Active)
	require.False(t, last.Registered, "a controller-only process has no broker epoch")
	combined := plan[6]
	require.Equal(t, int32(3), combined.NodeID)
	require.True(t, combined.Registered)
	require.Equal(t, []string{"controller", "storage-node", "replication"}, combined.Roles)
	require.Equal(t, "127.0.0.1:9050", plan[1].Addr, "the gRPC endpoint, not the Kafka one")
}

func TestExpandRestartCmd(t *testing.T) {
	s := rollStep{NodeID: 4, Addr: "10.0.0.4:9090", Roles: []string{"storage-node", "replication"}, Phase: phaseStorage}
	require.Equal(t, "ssh 10.0.0.4 systemctl restart sluice@4 # 9090 storage-node,replication storage-node 10.0.0.4:9090",
		expandRestartCmd("ssh {host} systemctl restart sluice@{node} # {port} {roles} {role} {addr}", s))
}
