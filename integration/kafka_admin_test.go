package integration

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/integration/cluster"
)

// TestKafkaAdmin administers a cluster of one controller and three storage
// nodes (each also a group and transaction coordinator) with franz-go's
// kadm over the Kafka protocol only, and checks every answer against what
// the processes are: node ids and Kafka addresses, leaders, topic ids,
// configs and their sources, coordinators.
func TestKafkaAdmin(t *testing.T) {
	c := cluster.Start(t, cluster.Options{StorageNodes: 3})
	sdk := cluster.Client(t, c)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaBootstrap()...), kgo.RetryTimeout(20*time.Second))
	require.NoError(t, err)
	t.Cleanup(kcl.Close)
	adm := kadm.NewClient(kcl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// live makes kadm's topic listings ask a node rather than answer from
	// the client's metadata cache (which keeps topics for 5 s).
	live := kadm.WithAuthorizedOps(ctx)

	// The Kafka address of every node that serves Kafka clients: the
	// storage nodes (the controller runs alone and registers as no node).
	kafkaAddr := map[int32]string{}
	for _, p := range c.StorageNodes() {
		kafkaAddr[p.NodeID] = p.KafkaAddr
	}
	addrOf := func(host string, port int32) string { return net.JoinHostPort(host, strconv.Itoa(int(port))) }

	var ordersID kadm.TopicID
	t.Run("CreateTopics", func(t *testing.T) {
		resp, err := adm.CreateTopics(ctx, 3, 2, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "orders", "events")
		require.NoError(t, err)
		for _, name := range []string{"orders", "events"} {
			r := resp[name]
			require.NoError(t, r.Err, r.ErrMessage)
			require.NotEqual(t, kadm.TopicID{}, r.ID)
			require.Equal(t, int32(3), r.NumPartitions)
			require.Equal(t, int16(2), r.ReplicationFactor)
			require.Equal(t, "3600000", *r.Configs["retention.ms"].Value)
			require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, r.Configs["retention.ms"].Source)
			require.Equal(t, kmsg.ConfigSourceDefaultConfig, r.Configs["segment.ms"].Source)
		}
		ordersID = resp["orders"].ID

		// -1 and -1: the cluster's defaults.
		d, err := adm.CreateTopic(ctx, -1, -1, nil, "defaults")
		require.NoError(t, err)
		require.NoError(t, d.Err)
		require.GreaterOrEqual(t, d.NumPartitions, int32(1))
		require.GreaterOrEqual(t, d.ReplicationFactor, int16(1))

		// Validate-only creates nothing.
		v, err := adm.ValidateCreateTopics(ctx, 1, 1, nil, "not-created")
		require.NoError(t, err)
		require.NoError(t, v["not-created"].Err)
		topics, err := adm.ListTopics(live)
		require.NoError(t, err)
		require.True(t, topics.Has("orders"))
		require.False(t, topics.Has("not-created"))
	})

	t.Run("Metadata", func(t *testing.T) {
		md, err := adm.Metadata(live, "orders")
		require.NoError(t, err)
		require.Len(t, md.Brokers, 3)
		for _, b := range md.Brokers {
			require.Equal(t, kafkaAddr[b.NodeID], addrOf(b.Host, b.Port), "node %d", b.NodeID)
		}
		require.Contains(t, kafkaAddr, md.Controller, "the controller id names a node with a Kafka listener")
		dc, err := sdk.DescribeCluster(ctx)
		require.NoError(t, err)
		require.Equal(t, dc.GetClusterId(), md.Cluster)

		td := md.Topics["orders"]
		require.NoError(t, td.Err)
		require.Equal(t, ordersID, td.ID)
		require.False(t, td.IsInternal)
		require.Len(t, td.Partitions, 3)
		grpcMD, err := sdk.Metadata(ctx, "orders")
		require.NoError(t, err)
		for _, gp := range grpcMD.GetTopics()[0].GetPartitions() {
			p := td.Partitions[gp.GetPartition()]
			require.NoError(t, p.Err)
			require.Equal(t, gp.GetLeaderId(), p.Leader)
			require.Equal(t, gp.GetLeaderEpoch(), p.LeaderEpoch)
			require.ElementsMatch(t, gp.GetReplicas(), p.Replicas)
			require.ElementsMatch(t, gp.GetIsr(), p.ISR)
			require.Empty(t, p.OfflineReplicas)
		}

		missing, err := adm.Metadata(live, "no-such-topic")
		require.NoError(t, err)
		require.ErrorIs(t, missing.Topics["no-such-topic"].Err, kerr.UnknownTopicOrPartition, "Sluice creates no topic on Metadata")
	})

	t.Run("DescribeCluster", func(t *testing.T) {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.EndpointType = 1
		resp, err := req.RequestWith(ctx, kcl)
		require.NoError(t, err)
		require.Zero(t, resp.ErrorCode)
		require.Equal(t, int16(2), resp.Version, "the newest version both sides know")
		dc, err := sdk.DescribeCluster(ctx)
		require.NoError(t, err)
		require.Equal(t, dc.GetClusterId(), resp.ClusterID)
		require.Len(t, resp.Brokers, 3)
		for _, b := range resp.Brokers {
			require.Equal(t, kafkaAddr[b.NodeID], addrOf(b.Host, b.Port))
			require.False(t, b.IsFenced)
		}
		require.Contains(t, kafkaAddr, resp.ControllerID)
	})

	t.Run("Configs", func(t *testing.T) {
		value := func(t *testing.T, topic, name string) kadm.Config {
			t.Helper()
			rcs, err := adm.DescribeTopicConfigs(ctx, topic)
			require.NoError(t, err)
			rc, err := rcs.On(topic, nil)
			require.NoError(t, err)
			require.NoError(t, rc.Err, rc.ErrMessage)
			for _, c := range rc.Configs {
				if c.Key == name {
					return c
				}
			}
			t.Fatalf("%s has no config %s", topic, name)
			return kadm.Config{}
		}
		c := value(t, "orders", "retention.ms")
		require.Equal(t, "3600000", val(c))
		require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, c.Source)
		require.NotEmpty(t, c.Synonyms)
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, c.Synonyms[len(c.Synonyms)-1].Source, "the built-in default is the last synonym")
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, value(t, "orders", "cleanup.policy").Source)

		// Incremental: set one, delete another.
		ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
			{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")},
			{Op: kadm.DeleteConfig, Name: "retention.ms"},
		}, "orders")
		require.NoError(t, err)
		require.NoError(t, ar[0].Err, ar[0].ErrMessage)
		require.Equal(t, "compact", val(value(t, "orders", "cleanup.policy")))
		c = value(t, "orders", "retention.ms")
		require.Equal(t, "604800000", val(c))
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, c.Source)

		// Legacy: the named entries replace every override.
		ar, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "segment.ms", Value: kadm.StringPtr("3600000")}}, "orders")
		require.NoError(t, err)
		require.NoError(t, ar[0].Err, ar[0].ErrMessage)
		require.Equal(t, "3600000", val(value(t, "orders", "segment.ms")))
		c = value(t, "orders", "cleanup.policy")
		require.Equal(t, "delete", val(c), "an override the legacy request left out is reset")
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, c.Source)

		// The cluster-wide default, on the broker resource named "".
		bc, err := adm.DescribeBrokerConfigs(ctx)
		require.NoError(t, err)
		require.NoError(t, bc[0].Err, bc[0].ErrMessage)
		require.NotEmpty(t, bc[0].Configs)
		ar, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.retention.ms", Value: kadm.StringPtr("86400000")}})
		require.NoError(t, err)
		require.NoError(t, ar[0].Err, ar[0].ErrMessage)
		c = value(t, "events", "retention.ms")
		require.Equal(t, "3600000", val(c), "the topic's own value wins")
		c = value(t, "defaults", "retention.ms")
		require.Equal(t, "86400000", val(c))
		require.Equal(t, kmsg.ConfigSourceDynamicDefaultBrokerConfig, c.Source)
		ar, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "log.retention.ms"}})
		require.NoError(t, err)
		require.NoError(t, ar[0].Err, ar[0].ErrMessage)
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, value(t, "defaults", "retention.ms").Source)
	})

	t.Run("CreatePartitions", func(t *testing.T) {
		resp, err := adm.CreatePartitions(ctx, 2, "orders")
		require.NoError(t, err)
		require.NoError(t, resp["orders"].Err, resp["orders"].ErrMessage)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			md, err := adm.Metadata(live, "orders")
			require.NoError(ct, err)
			ps := md.Topics["orders"].Partitions
			require.Len(ct, ps, 5)
			for _, p := range ps {
				require.NoError(ct, p.Err)
				require.Contains(ct, kafkaAddr, p.Leader)
			}
		}, 20*time.Second, 50*time.Millisecond)

		resp, err = adm.UpdatePartitions(ctx, 2, "orders")
		require.NoError(t, err)
		require.ErrorIs(t, resp["orders"].Err, kerr.InvalidPartitions)
		require.Contains(t, resp["orders"].ErrMessage, "has 5 partitions")
	})

	t.Run("FindCoordinator", func(t *testing.T) {
		check := func(t *testing.T, find func() kadm.FindCoordinatorResponses, key string) kadm.FindCoordinatorResponse {
			var got kadm.FindCoordinatorResponse
			// The first lookup creates the internal topic; until it has
			// leaders the answer is COORDINATOR_NOT_AVAILABLE, which
			// clients retry.
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				got = find()[key]
				require.NoError(ct, got.Err, got.ErrMessage)
			}, 30*time.Second, 100*time.Millisecond)
			require.Equal(t, kafkaAddr[got.NodeID], addrOf(got.Host, got.Port))
			return got
		}
		g := check(t, func() kadm.FindCoordinatorResponses { return adm.FindGroupCoordinators(ctx, "group-1") }, "group-1")
		id, _, err := sdk.FindCoordinator(ctx, "group-1")
		require.NoError(t, err)
		require.Equal(t, id, g.NodeID, "the same coordinator as over gRPC")
		check(t, func() kadm.FindCoordinatorResponses { return adm.FindTxnCoordinators(ctx, "txn-1") }, "txn-1")

		// A batch (FindCoordinator v4+) answers each key.
		all := adm.FindGroupCoordinators(ctx, "group-1", "group-2", "group-3")
		require.Len(t, all, 3)
		for _, r := range all {
			require.NoError(t, r.Err, r.ErrMessage)
		}
		gr, err := sdk.Conn(c.StorageNodes()[0].Addr)
		require.NoError(t, err)
		txn, err := groupv1.NewGroupCoordinatorServiceClient(gr).FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{
			KeyType: groupv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, Keys: []string{"txn-1"}})
		require.NoError(t, err)
		require.Equal(t, txn.GetCoordinators()[0].GetNodeId(), adm.FindTxnCoordinators(ctx, "txn-1")["txn-1"].NodeID)

		// The internal topics are flagged internal.
		// (WithAuthorizedOps makes kadm ask a node instead of answering
		// from the client's metadata cache.)
		topics, err := adm.ListTopicsWithInternal(live)
		require.NoError(t, err)
		require.True(t, topics["__consumer_offsets"].IsInternal)
		require.True(t, topics["__transaction_state"].IsInternal)
		require.NotEmpty(t, topics["__consumer_offsets"].AuthorizedOperations, "everything is allowed until authorization exists")
		plain, err := adm.ListTopics(live)
		require.NoError(t, err)
		require.False(t, plain.Has("__consumer_offsets"))
	})

	t.Run("ElectAndReassign", func(t *testing.T) {
		el, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"orders": {0: {}}})
		require.NoError(t, err)
		if r := el["orders"][0]; r.Err != nil {
			require.ErrorIs(t, r.Err, kerr.ElectionNotNeeded, r.ErrMessage)
		}

		md, err := adm.Metadata(live, "orders")
		require.NoError(t, err)
		cur := md.Topics["orders"].Partitions[0].Replicas
		var target []int32
		for id := range kafkaAddr {
			if !containsInt32(cur, id) {
				target = append(target, id)
			}
		}
		target = append(target, cur[0])
		var req kadm.AlterPartitionAssignmentsReq
		req.Assign("orders", 0, target)
		ar, err := adm.AlterPartitionAssignments(ctx, req)
		require.NoError(t, err)
		require.NoError(t, ar.Error())
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			md, err := adm.Metadata(live, "orders")
			require.NoError(ct, err)
			require.ElementsMatch(ct, target, md.Topics["orders"].Partitions[0].Replicas)
			ls, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"orders": {0: {}}})
			require.NoError(ct, err)
			require.Empty(ct, ls["orders"], "the reassignment finished")
		}, 30*time.Second, 100*time.Millisecond)

		req = nil
		req.CancelAssign("orders", 1)
		ar, err = adm.AlterPartitionAssignments(ctx, req)
		require.NoError(t, err)
		require.ErrorIs(t, ar["orders"][1].Err, kerr.NoReassignmentInProgress)
	})

	t.Run("DeleteTopics", func(t *testing.T) {
		resp, err := adm.DeleteTopics(ctx, "events")
		require.NoError(t, err)
		require.NoError(t, resp["events"].Err, resp["events"].ErrMessage)

		// DeleteTopics v6 names a topic by id.
		md, err := adm.Metadata(live, "defaults")
		require.NoError(t, err)
		req := kmsg.NewPtrDeleteTopicsRequest()
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.TopicID = md.Topics["defaults"].ID
		req.Topics = []kmsg.DeleteTopicsRequestTopic{dt}
		req.TimeoutMillis = 15000
		dr, err := req.RequestWith(ctx, kcl)
		require.NoError(t, err)
		require.Equal(t, int16(6), dr.Version)
		require.Zero(t, dr.Topics[0].ErrorCode, "%v", dr.Topics[0].ErrorMessage)
		require.Equal(t, "defaults", *dr.Topics[0].Topic)

		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			topics, err := adm.ListTopics(live)
			require.NoError(ct, err)
			require.False(ct, topics.Has("events"))
			require.False(ct, topics.Has("defaults"))
		}, 10*time.Second, 50*time.Millisecond)

		resp, err = adm.DeleteTopics(ctx, "events")
		require.NoError(t, err)
		require.ErrorIs(t, resp["events"].Err, kerr.UnknownTopicOrPartition)
		require.NotEmpty(t, resp["events"].ErrMessage)
	})

	t.Run("BadInput", func(t *testing.T) { kafkaAdminBadInput(t, ctx, kcl, adm, c.StorageNodes()[0].NodeID) })

	// Sarama's admin client, at its default protocol versions (Kafka
	// 2.8's) and at its newest.
	for _, v := range []sarama.KafkaVersion{sarama.DefaultVersion, sarama.MaxVersion} {
		t.Run("Sarama"+v.String(), func(t *testing.T) { kafkaAdminSarama(t, c.KafkaBootstrap(), v, kafkaAddr) })
	}
}

// kafkaAdminSarama administers topics and configs with sarama's
// ClusterAdmin at protocol version v.
func kafkaAdminSarama(t *testing.T, bootstrap []string, v sarama.KafkaVersion, kafkaAddr map[int32]string) {
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.Admin.Timeout = 20 * time.Second
	ca, err := sarama.NewClusterAdmin(bootstrap, cfg)
	require.NoError(t, err)
	defer ca.Close()
	topic := "sarama-" + strings.ReplaceAll(v.String(), ".", "-")

	require.NoError(t, ca.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 2,
		ConfigEntries: map[string]*string{"retention.ms": kadm.StringPtr("7200000")}}, false))
	err = ca.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 2}, false)
	require.ErrorIs(t, err, sarama.ErrTopicAlreadyExists)
	err = ca.CreateTopic(topic+"-neg", &sarama.TopicDetail{NumPartitions: -5, ReplicationFactor: 1}, false)
	require.ErrorIs(t, err, sarama.ErrInvalidPartitions)

	brokers, controller, err := ca.DescribeCluster()
	require.NoError(t, err)
	require.Len(t, brokers, len(kafkaAddr))
	for _, b := range brokers {
		require.Equal(t, kafkaAddr[b.ID()], b.Addr())
	}
	require.Contains(t, kafkaAddr, controller)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		md, err := ca.DescribeTopics([]string{topic})
		require.NoError(ct, err)
		require.Len(ct, md, 1)
		require.Equal(ct, sarama.ErrNoError, md[0].Err)
		require.Len(ct, md[0].Partitions, 2)
		for _, p := range md[0].Partitions {
			require.Contains(ct, kafkaAddr, p.Leader)
			require.Len(ct, p.Replicas, 2)
		}
	}, 10*time.Second, 50*time.Millisecond)
	topics, err := ca.ListTopics()
	require.NoError(t, err)
	require.Equal(t, int32(2), topics[topic].NumPartitions)
	require.Equal(t, "7200000", *topics[topic].ConfigEntries["retention.ms"])

	entries, err := ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"retention.ms", "cleanup.policy"}})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.NoError(t, ca.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"cleanup.policy": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: kadm.StringPtr("compact")},
	}, false))
	require.NoError(t, ca.AlterConfig(sarama.TopicResource, topic, map[string]*string{"segment.ms": kadm.StringPtr("3600000")}, false))
	entries, err = ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		if e.Source == sarama.SourceTopic {
			got[e.Name] = e.Value
		}
	}
	require.Equal(t, map[string]string{"segment.ms": "3600000"}, got, "the legacy alter replaced every override")
	err = ca.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"no.such.config": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: kadm.StringPtr("1")},
	}, false)
	require.ErrorContains(t, err, "no.such.config")

	require.NoError(t, ca.CreatePartitions(topic, 3, nil, false))
	require.NoError(t, ca.DeleteTopic(topic))
	require.ErrorIs(t, ca.DeleteTopic(topic), sarama.ErrUnknownTopicOrPartition)
}

// kafkaAdminBadInput sends requests with bad items beside good ones: each
// bad item gets its own Kafka error and a message, the good ones go
// through.
func kafkaAdminBadInput(t *testing.T, ctx context.Context, kcl *kgo.Client, adm *kadm.Client, node int32) {
	topic := func(name string, partitions int32, rf int16, configs ...string) kmsg.CreateTopicsRequestTopic {
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, partitions, rf
		for i := 0; i+1 < len(configs); i += 2 {
			ct.Configs = append(ct.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: configs[i], Value: kadm.StringPtr(configs[i+1])})
		}
		return ct
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 15000
	req.Topics = []kmsg.CreateTopicsRequestTopic{
		topic("", 1, 1),
		topic("negative", -5, 1),
		topic("zero", 0, 1),
		topic("badcfg", 1, 1, "no.such.config", "1"),
		topic("badvalue", 1, 1, "retention.ms", "soon"),
		topic("good-one", 2, 1),
		topic("bad name", 1, 1),
		topic("too-many-replicas", 1, 5),
		topic("orders", 1, 1),
	}
	resp, err := req.RequestWith(ctx, kcl)
	require.NoError(t, err)
	require.Equal(t, int16(7), resp.Version)
	want := []error{kerr.InvalidTopicException, kerr.InvalidPartitions, kerr.InvalidPartitions, kerr.InvalidConfig, kerr.InvalidConfig,
		nil, kerr.InvalidTopicException, kerr.InvalidReplicationFactor, kerr.TopicAlreadyExists}
	require.Len(t, resp.Topics, len(want))
	for i, w := range want {
		r := resp.Topics[i]
		require.Equal(t, req.Topics[i].Topic, r.Topic)
		if w == nil {
			require.Zero(t, r.ErrorCode, "%s: %v", r.Topic, r.ErrorMessage)
			require.Equal(t, int32(2), r.NumPartitions)
			continue
		}
		got := kerr.ErrorForCode(r.ErrorCode)
		require.True(t, errors.Is(got, w), "%q: want %v, got %v (%v)", r.Topic, w, got, r.ErrorMessage)
		require.NotNil(t, r.ErrorMessage, "%q", r.Topic)
		require.NotEmpty(t, *r.ErrorMessage)
		t.Logf("%q: %v: %s", r.Topic, got, *r.ErrorMessage)
	}
	require.Contains(t, *resp.Topics[0].ErrorMessage, "empty")
	require.Contains(t, *resp.Topics[3].ErrorMessage, "no.such.config")

	// Configs: an unknown name, an unknown topic, a resource Sluice lacks.
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "no.such.config", Value: kadm.StringPtr("1")}}, "orders")
	require.NoError(t, err)
	require.ErrorIs(t, ar[0].Err, kerr.InvalidConfig)
	require.Contains(t, ar[0].ErrMessage, "no.such.config")
	ar, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("-7")}}, "orders")
	require.NoError(t, err)
	require.ErrorIs(t, ar[0].Err, kerr.InvalidConfig)
	rcs, err := adm.DescribeTopicConfigs(ctx, "no-such-topic")
	var se *kadm.ShardErrors
	if err != nil && !errors.As(err, &se) {
		require.NoError(t, err)
	}
	if len(rcs) > 0 {
		require.ErrorIs(t, rcs[0].Err, kerr.UnknownTopicOrPartition)
	}
	dreq := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeBrokerLogger, strconv.Itoa(int(node))
	dreq.Resources = []kmsg.DescribeConfigsRequestResource{dr}
	dresp, err := dreq.RequestWith(ctx, kcl)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidRequest.Code, dresp.Resources[0].ErrorCode)
	require.Contains(t, *dresp.Resources[0].ErrorMessage, "BROKER_LOGGER")

	// Partitions: an unknown topic.
	cp, err := adm.CreatePartitions(ctx, 1, "no-such-topic")
	if err == nil {
		require.ErrorIs(t, cp["no-such-topic"].Err, kerr.UnknownTopicOrPartition)
	}
}

// val is a config's value ("" when null).
func val(c kadm.Config) string { return c.MaybeValue() }

func containsInt32(s []int32, x int32) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestKafkaAdminAcrossControllerFailover: admin requests sent over the
// Kafka protocol to a storage node reach whichever controller is active.
// With the active one SIGKILLed, the node follows the election (standbys'
// NOT_CONTROLLER hints, retries while none is active) and the next
// CreateTopics succeeds within its timeout; DescribeCluster names a node
// with a Kafka listener throughout.
func TestKafkaAdminAcrossControllerFailover(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 3, StorageNodes: 1})
	sdk := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := c.StorageNodes()[0]
	kcl, err := kgo.NewClient(kgo.SeedBrokers(node.KafkaAddr))
	require.NoError(t, err)
	t.Cleanup(kcl.Close)
	adm := kadm.NewClient(kcl)
	adm.SetTimeoutMillis(30000)

	r, err := adm.CreateTopic(ctx, 1, 1, nil, "before")
	require.NoError(t, err)
	require.NoError(t, r.Err, r.ErrMessage)

	active := awaitActiveController(t, ctx, c, sdk, nil)
	require.NoError(t, active.Kill())

	r, err = adm.CreateTopic(ctx, 1, 1, nil, "after")
	require.NoError(t, err)
	require.NoError(t, r.Err, r.ErrMessage)
	now := awaitActiveController(t, ctx, c, sdk, active)
	require.NotEqual(t, active.NodeID, now.NodeID)

	md, err := adm.Metadata(kadm.WithAuthorizedOps(ctx), "before", "after")
	require.NoError(t, err)
	require.Equal(t, node.NodeID, md.Controller, "the only node with a Kafka listener stands in for the controller")
	for _, name := range []string{"before", "after"} {
		require.NoError(t, md.Topics[name].Err, name)
	}
}
