package groupcoord

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/coordinator"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/service"
)

// FindCoordinator with key type TRANSACTION: the empty key names a live
// transaction coordinator, the same for every caller; a transactional id
// names the coordinator of its __transaction_state partition (the leader
// when it runs the role); an oversized id is refused.
func TestFindTransactionCoordinator(t *testing.T) {
	alive := commonv1.BrokerState_BROKER_STATE_ALIVE
	ep := func(port int32) []*commonv1.Endpoint {
		return []*commonv1.Endpoint{{Name: "grpc", Host: "127.0.0.1", Port: port}}
	}
	img := metadata.Empty()
	img.Revision = 1
	img.Brokers[1] = &commonv1.Broker{Id: 1, Roles: []string{"storage-node", "group-coordinator"}, State: alive, Endpoints: ep(1)}
	img.Brokers[2] = &commonv1.Broker{Id: 2, Roles: []string{"storage-node", "transaction-coordinator"}, State: alive, Endpoints: ep(2)}
	img.Brokers[3] = &commonv1.Broker{Id: 3, Roles: []string{"transaction-coordinator"}, State: alive, Endpoints: ep(3)}
	ts := &metadata.Topic{Name: metadata.TransactionStateTopic, Internal: true}
	for p := int32(0); p < 5; p++ {
		leader := int32(1)
		if p == coordinator.PartitionFor("led-by-2", 5) {
			leader = 2
		}
		ts.Partitions = append(ts.Partitions, &commonv1.PartitionState{Topic: ts.Name, Partition: p, LeaderId: leader})
	}
	img.Topics[ts.Name] = ts
	cache := metadata.NewCache()
	cache.Reset(img)
	c := &GroupCoordinator{now: time.Now, logger: log.Discard(), shards: map[int32]*shard{},
		deps: service.Deps{Metadata: cache, Node: config.Node{ID: 1}}}

	find := func(keys ...string) []*groupv1.Coordinator {
		resp, err := c.FindCoordinator(context.Background(), &groupv1.FindCoordinatorRequest{
			KeyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, Keys: keys,
		})
		require.NoError(t, err)
		return resp.GetCoordinators()
	}
	long := string(make([]byte, coordinator.MaxTransactionalIDBytes+1))
	got := find("", "led-by-2", "other", long)
	require.Len(t, got, 4)
	require.Nil(t, got[0].GetError())
	require.Contains(t, []int32{2, 3}, got[0].GetNodeId(), "a process that runs the transaction-coordinator role")
	require.Equal(t, got[0].GetNodeId(), find("")[0].GetNodeId(), "the same one for every caller")
	require.Equal(t, int32(2), got[1].GetNodeId(), "the leader runs the role: it coordinates")
	require.Equal(t, "127.0.0.1:2", got[1].GetAddress())
	require.Equal(t, int32(3), got[2].GetNodeId(), "the leader does not run the role: the process of its own does")
	require.Equal(t, errs.InvalidRequest, errs.FromProto(got[3].GetError()).Code)

	// Without any transaction coordinator alive, nobody.
	img.Brokers[2].State = commonv1.BrokerState_BROKER_STATE_FENCED
	img.Brokers[3].State = commonv1.BrokerState_BROKER_STATE_FENCED
	img.Revision = 2
	cache.Reset(img)
	got = find("", "other")
	require.Equal(t, errs.CoordinatorNotAvailable, errs.FromProto(got[0].GetError()).Code)
	require.Equal(t, errs.CoordinatorNotAvailable, errs.FromProto(got[1].GetError()).Code)
}
