package nodeapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
)

const ordersID = "0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3"

// testImage is a cluster of four nodes: 1 and 2 serve Kafka, 3 has no
// Kafka listener, 4 serves Kafka but is fenced; controller 9 runs alone (no
// Kafka listener).
func testImage() *metadata.Image {
	ep := func(name, host string, port int32) *commonv1.Endpoint {
		return &commonv1.Endpoint{Name: name, Host: host, Port: port}
	}
	alive, fenced := commonv1.BrokerState_BROKER_STATE_ALIVE, commonv1.BrokerState_BROKER_STATE_FENCED
	return metadata.FromSnapshot(&controllerv1.MetadataSnapshot{
		ClusterId:    "cluster-x",
		ControllerId: 9,
		Controllers:  []*controllerv1.ControllerMember{{NodeId: 9, Address: "127.0.0.1:9000"}},
		Brokers: []*commonv1.Broker{
			{Id: 1, Rack: "r1", State: alive, Endpoints: []*commonv1.Endpoint{ep("grpc", "127.0.0.1", 9001), ep("kafka", "127.0.0.1", 19001)}},
			{Id: 2, State: alive, Endpoints: []*commonv1.Endpoint{ep("grpc", "127.0.0.1", 9002), ep("kafka", "127.0.0.1", 19002)}},
			{Id: 3, State: alive, Endpoints: []*commonv1.Endpoint{ep("grpc", "127.0.0.1", 9003)}},
			{Id: 4, State: fenced, Endpoints: []*commonv1.Endpoint{ep("grpc", "127.0.0.1", 9004), ep("kafka", "127.0.0.1", 19004)}},
		},
		Topics: []*controllerv1.TopicMetadata{
			{Name: "orders", TopicId: ordersID, Partitions: []*commonv1.PartitionState{
				{Topic: "orders", Partition: 0, LeaderId: 1, LeaderEpoch: 3, Replicas: []int32{1, 2}, Isr: []int32{1, 2}},
				{Topic: "orders", Partition: 1, LeaderId: 3, LeaderEpoch: 1, Replicas: []int32{3, 1}, Isr: []int32{3, 1}},
				{Topic: "orders", Partition: 2, LeaderId: -1, LeaderEpoch: 5, Replicas: []int32{4, 2}, Isr: []int32{4}, OfflineReplicas: []int32{4}},
			}},
			{Name: "__consumer_offsets", TopicId: "11111111-2222-4333-8444-555555555555", Internal: true, Partitions: []*commonv1.PartitionState{
				{Topic: "__consumer_offsets", Partition: 0, LeaderId: 2, Replicas: []int32{2}, Isr: []int32{2}},
			}},
		},
	})
}

func name(s string) *string { return &s }

// code is the Kafka number of a catalog code (they are the same).
func code(c errs.Code) int16 { return int16(c) }

func TestMetadataBrokersAndController(t *testing.T) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp := metadataResponse(testImage(), req)
	require.Len(t, resp.Brokers, 2, "only live nodes with a Kafka listener")
	require.Equal(t, int32(1), resp.Brokers[0].NodeID)
	require.Equal(t, "127.0.0.1", resp.Brokers[0].Host)
	require.Equal(t, int32(19001), resp.Brokers[0].Port)
	require.Equal(t, "r1", *resp.Brokers[0].Rack)
	require.Nil(t, resp.Brokers[1].Rack, "no rack is null, as in Kafka")
	require.Equal(t, "cluster-x", *resp.ClusterID)
	require.Equal(t, int32(1), resp.ControllerID, "the controller has no Kafka listener: the lowest live Kafka node stands in")
	require.Empty(t, resp.Topics, "an empty topic list asks for none")
}

func TestMetadataControllerWithKafkaListener(t *testing.T) {
	img := testImage()
	img.ControllerID = 2
	require.Equal(t, int32(2), metadataResponse(img, kmsg.NewPtrMetadataRequest()).ControllerID)
	img.ControllerID = 4 // fenced
	require.Equal(t, int32(1), metadataResponse(img, kmsg.NewPtrMetadataRequest()).ControllerID)
}

func TestMetadataAllTopics(t *testing.T) {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	req.Topics = nil
	resp := metadataResponse(testImage(), req)
	require.Len(t, resp.Topics, 2, "null asks for every topic, internal ones too")
	require.Equal(t, "__consumer_offsets", *resp.Topics[0].Topic)
	require.True(t, resp.Topics[0].IsInternal)

	orders := resp.Topics[1]
	require.Equal(t, "orders", *orders.Topic)
	require.False(t, orders.IsInternal)
	require.Equal(t, topicID(ordersID), orders.TopicID)
	require.Equal(t, ordersID, kafka.TopicIDString(orders.TopicID))
	require.Len(t, orders.Partitions, 3)

	p0 := orders.Partitions[0]
	require.Zero(t, p0.ErrorCode)
	require.Equal(t, int32(1), p0.Leader)
	require.Equal(t, int32(3), p0.LeaderEpoch)
	require.Equal(t, []int32{1, 2}, p0.Replicas)
	require.Equal(t, []int32{1, 2}, p0.ISR)
	require.Empty(t, p0.OfflineReplicas)

	p1 := orders.Partitions[1]
	require.Equal(t, code(errs.LeaderNotAvailable), p1.ErrorCode, "a leader without a Kafka listener cannot be dialed")
	require.Equal(t, int32(-1), p1.Leader)
	require.Equal(t, int32(1), p1.LeaderEpoch)

	p2 := orders.Partitions[2]
	require.Equal(t, code(errs.LeaderNotAvailable), p2.ErrorCode)
	require.Equal(t, int32(-1), p2.Leader)
	require.Equal(t, []int32{4}, p2.OfflineReplicas, "the fenced node's replica is offline")
	require.Equal(t, int32(-2147483648), orders.AuthorizedOperations, "not asked for")
}

func TestMetadataNamedTopics(t *testing.T) {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	req.IncludeTopicAuthorizedOperations = true
	byID := kmsg.NewMetadataRequestTopic()
	byID.TopicID = topicID(ordersID)
	unknownID := kmsg.NewMetadataRequestTopic()
	unknownID.TopicID = topicID("ffffffff-ffff-4fff-8fff-ffffffffffff")
	req.Topics = []kmsg.MetadataRequestTopic{
		{Topic: name("missing")}, {Topic: name("bad name")}, byID, unknownID, {Topic: name("orders")}, {},
	}
	resp := metadataResponse(testImage(), req)
	require.Len(t, resp.Topics, 6)
	require.Equal(t, code(errs.UnknownTopicOrPartition), resp.Topics[0].ErrorCode, "Sluice creates no topic on Metadata")
	require.Equal(t, "missing", *resp.Topics[0].Topic)
	require.Equal(t, code(errs.InvalidTopic), resp.Topics[1].ErrorCode)
	require.Equal(t, "orders", *resp.Topics[2].Topic, "found by id, named")
	require.Len(t, resp.Topics[2].Partitions, 3)
	require.Equal(t, code(errs.UnknownTopicID), resp.Topics[3].ErrorCode)
	require.Nil(t, resp.Topics[3].Topic)
	require.Equal(t, "orders", *resp.Topics[4].Topic)
	require.Equal(t, int32(topicOperations), resp.Topics[4].AuthorizedOperations)
	require.Equal(t, code(errs.InvalidRequest), resp.Topics[5].ErrorCode, "neither name nor id")
}

func TestTopicIDRoundTrip(t *testing.T) {
	id := topicID(ordersID)
	require.NotEqual(t, [16]byte{}, id)
	require.Equal(t, ordersID, kafka.TopicIDString(id))
	require.Equal(t, [16]byte{}, topicID(""))
	require.Equal(t, [16]byte{}, topicID("not-a-uuid"))
	require.Equal(t, [16]byte{}, topicID("zz1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3"))
}

func TestDescribeCluster(t *testing.T) {
	cache := metadata.NewCache()
	cache.Reset(testImage())
	n := &node{cache: cache}
	req := kmsg.NewPtrDescribeClusterRequest()
	req.Version = 2
	req.EndpointType = 1
	req.IncludeClusterAuthorizedOperations = true
	resp := n.describeCluster(context.Background(), req)
	require.Zero(t, resp.ErrorCode)
	require.Equal(t, "cluster-x", resp.ClusterID)
	require.Equal(t, int32(1), resp.ControllerID)
	require.Equal(t, int32(clusterOperations), resp.ClusterAuthorizedOperations)
	require.Len(t, resp.Brokers, 2)

	req.IncludeFencedBrokers = true
	resp = n.describeCluster(context.Background(), req)
	require.Len(t, resp.Brokers, 3)
	require.Equal(t, int32(4), resp.Brokers[2].NodeID)
	require.True(t, resp.Brokers[2].IsFenced)

	req.EndpointType = 2
	resp = n.describeCluster(context.Background(), req)
	require.Equal(t, code(errs.InvalidRequest), resp.ErrorCode)
	require.Contains(t, *resp.ErrorMessage, "controllers have no Kafka listener")
}

func TestGroupCoordinatorAddrs(t *testing.T) {
	img := testImage()
	img.Brokers[2].Roles = []string{"storage-node", groupCoordinatorRole}
	img.Brokers[3].Roles = []string{groupCoordinatorRole}
	img.Brokers[4].Roles = []string{groupCoordinatorRole} // fenced
	addrs := groupCoordinatorAddrs(img, 3)
	require.Equal(t, "127.0.0.1:9003", addrs[0], "this process first when it runs the role")
	require.ElementsMatch(t, []string{"127.0.0.1:9002", "127.0.0.1:9003"}, addrs, "live ones only, each once")
	require.Empty(t, groupCoordinatorAddrs(testImage(), 1))
}
