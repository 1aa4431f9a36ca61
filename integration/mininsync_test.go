package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// min.insync.replicas above the replication factor would make every acks=all
// produce fail (Kafka accepts it, a known trap): it is refused at topic
// create and at alter-configs, for the topic's own value and for the
// cluster-wide default, with InvalidArgument naming both numbers.
func TestMinInsyncReplicasAboveReplicationFactorIsRefused(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, Combined: true})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	create := func(name string, rf int32, configs map[string]string) *errs.Error {
		resp, err := cl.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{
			{Name: name, ReplicationFactor: &rf, Configs: configs}}})
		require.NoError(t, err)
		return errs.FromProto(resp.GetResults()[0].GetError())
	}
	set := func(k, v string) *controllerv1.AlterConfigOp {
		return &controllerv1.AlterConfigOp{Name: k, Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET, Value: v}
	}
	alter := func(typ controllerv1.ResourceType, name string, ops ...*controllerv1.AlterConfigOp) *errs.Error {
		resp, err := cl.AlterConfigs(ctx, &controllerv1.AlterConfigsRequest{Resources: []*controllerv1.AlterConfigsResource{{
			Resource: &controllerv1.ConfigResource{Type: typ, Name: name}, Ops: ops}}})
		require.NoError(t, err)
		return errs.FromProto(resp.GetResults()[0].GetError())
	}
	refused := func(e *errs.Error, want string) {
		t.Helper()
		require.NotNil(t, e, "want refused: %s", want)
		require.Equal(t, errs.InvalidConfig, e.Code)
		require.Equal(t, codes.InvalidArgument, errs.Lookup(e.Code).GRPC)
		require.Contains(t, e.Message, want)
	}
	topicType, brokerType := controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, controllerv1.ResourceType_RESOURCE_TYPE_BROKER

	// Create.
	refused(create("wide", 1, map[string]string{"min.insync.replicas": "2"}),
		`topic "wide": min.insync.replicas 2 is larger than the replication factor 1`)
	list, err := cl.ListTopics(ctx, false)
	require.NoError(t, err)
	require.Empty(t, list.GetTopics(), "the refused topic was not created")
	require.Nil(t, create("own", 1, map[string]string{"min.insync.replicas": "1"}))
	require.Nil(t, create("plain", 1, nil))

	// Alter the topic's own value; deleting it falls back to the default.
	refused(alter(topicType, "own", set("min.insync.replicas", "2")), "min.insync.replicas 2 is larger than the replication factor 1")
	require.Equal(t, map[string]string{"min.insync.replicas": "1"}, describe(t, ctx, cl, "own").GetConfigs(), "nothing applied")

	// The cluster-wide default: refused while a topic without its own value
	// has fewer replicas, naming that topic.
	refused(alter(brokerType, "", set("min.insync.replicas", "2")),
		"min.insync.replicas 2 as the cluster-wide default is larger than the replication factor of topics that do not override it: plain (replication factor 1)")
	require.Nil(t, alter(topicType, "plain", set("min.insync.replicas", "1")))
	require.Nil(t, alter(brokerType, "", set("min.insync.replicas", "2")), "every topic has its own value now")

	// Under that default, a new topic with fewer replicas needs its own
	// value, and an existing one cannot drop it.
	refused(create("later", 1, nil), `topic "later": the cluster-wide default min.insync.replicas 2 is larger than the topic's replication factor 1`)
	require.Nil(t, create("later", 1, map[string]string{"min.insync.replicas": "1"}))
	refused(alter(topicType, "own", &controllerv1.AlterConfigOp{Name: "min.insync.replicas", Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE}),
		"the cluster-wide default min.insync.replicas 2 is larger than the topic's replication factor 1")
}
