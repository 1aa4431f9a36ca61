package nodeapi

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestTopicSpec(t *testing.T) {
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "t", -1, -1
	spec, err := topicSpec(ct)
	require.NoError(t, err)
	require.Nil(t, spec.NumPartitions, "-1 asks for the cluster default")
	require.Nil(t, spec.ReplicationFactor)

	ct.NumPartitions, ct.ReplicationFactor = 3, 2
	ct.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms", Value: name("1000")}}
	spec, err = topicSpec(ct)
	require.NoError(t, err)
	require.Equal(t, int32(3), spec.GetNumPartitions())
	require.Equal(t, int32(2), spec.GetReplicationFactor())
	require.Equal(t, map[string]string{"retention.ms": "1000"}, spec.GetConfigs())

	ct.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{1, 2}}}
	_, err = topicSpec(ct)
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), "an assignment with counts")
	ct.NumPartitions, ct.ReplicationFactor = -1, -1
	spec, err = topicSpec(ct)
	require.NoError(t, err)
	require.Len(t, spec.GetAssignments(), 1)
	require.Equal(t, []int32{1, 2}, spec.GetAssignments()[0].GetReplicas())

	ct.Configs = append(ct.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: "retention.ms", Value: name("5")})
	_, err = topicSpec(ct)
	require.ErrorContains(t, err, "retention.ms is given twice")
	ct.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "cleanup.policy"}}
	_, err = topicSpec(ct)
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))
	require.ErrorContains(t, err, "null value")
}

func TestIncrementalResource(t *testing.T) {
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
	r.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{
		{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpSet, Value: name("10")},
		{Name: "segment.ms", Op: kmsg.IncrementalAlterConfigOpDelete},
		{Name: "cleanup.policy", Op: kmsg.IncrementalAlterConfigOpAppend, Value: name("compact")},
	}
	res, err := incrementalResource(r)
	require.NoError(t, err)
	require.Equal(t, controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, res.GetResource().GetType())
	require.Len(t, res.GetOps(), 3)
	require.Equal(t, controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_DELETE, res.GetOps()[1].GetOp())
	require.Equal(t, controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_APPEND, res.GetOps()[2].GetOp())

	bad := func(mut func(*kmsg.IncrementalAlterConfigsRequestResource), code errs.Code, msg string) {
		t.Helper()
		c := r
		c.Configs = append([]kmsg.IncrementalAlterConfigsRequestResourceConfig(nil), r.Configs...)
		mut(&c)
		_, err := incrementalResource(c)
		require.Equal(t, code, errs.CodeOf(err), "%v", err)
		require.ErrorContains(t, err, msg)
	}
	bad(func(c *kmsg.IncrementalAlterConfigsRequestResource) { c.Configs[0].Name = "no.such.config" }, errs.InvalidConfig, `unknown topic config "no.such.config"`)
	bad(func(c *kmsg.IncrementalAlterConfigsRequestResource) { c.Configs[1].Name = "retention.ms" }, errs.InvalidRequest, "altered twice")
	bad(func(c *kmsg.IncrementalAlterConfigsRequestResource) { c.Configs[0].Op = 9 }, errs.InvalidRequest, "unknown operation 9")
	bad(func(c *kmsg.IncrementalAlterConfigsRequestResource) { c.Configs[0].Value = nil }, errs.InvalidRequest, "null value")
	bad(func(c *kmsg.IncrementalAlterConfigsRequestResource) {
		c.ResourceType = kmsg.ConfigResourceTypeBrokerLogger
	}, errs.InvalidRequest, "no BROKER_LOGGER configs")
	bad(func(c *kmsg.IncrementalAlterConfigsRequestResource) { c.ResourceType = kmsg.ConfigResourceTypeBroker }, errs.InvalidConfig, "not a dynamic cluster config")
}

func TestLegacyResource(t *testing.T) {
	r := kmsg.NewAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBroker, ""
	r.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "log.retention.ms", Value: name("100")}}
	res, err := legacyResource(r)
	require.NoError(t, err)
	require.Equal(t, controllerv1.ResourceType_RESOURCE_TYPE_BROKER, res.GetResource().GetType())
	require.Equal(t, []*controllerv1.AlterConfigOp{{Name: "log.retention.ms", Op: controllerv1.AlterConfigOpType_ALTER_CONFIG_OP_TYPE_SET, Value: "100"}}, res.GetOps())

	r.Configs[0].Value = nil
	_, err = legacyResource(r)
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))

	topic := &controllerv1.ConfigResource{Type: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC}
	require.True(t, isOverride(topic, &controllerv1.ConfigEntry{Source: controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_TOPIC}))
	require.False(t, isOverride(topic, &controllerv1.ConfigEntry{Source: controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER}))
}

func TestConfigEntryAndSynonyms(t *testing.T) {
	img := testImage()
	img.Topics["orders"].Configs = map[string]string{"retention.ms": "1000"}
	img.ClusterConfigs = map[string]string{"log.retention.ms": "2000"}
	v := "1000"
	e := &controllerv1.ConfigEntry{Name: "retention.ms", Value: &v, Source: controllerv1.ConfigSource_CONFIG_SOURCE_DYNAMIC_TOPIC, Documentation: "doc"}
	c := configEntry(img, kmsg.ConfigResourceTypeTopic, "orders", e, true, true)
	require.Equal(t, "1000", *c.Value)
	require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, c.Source)
	require.False(t, c.IsDefault)
	require.Equal(t, kmsg.ConfigTypeLong, c.ConfigType)
	require.Equal(t, "doc", *c.Documentation)
	require.Len(t, c.ConfigSynonyms, 3)
	require.Equal(t, "retention.ms", c.ConfigSynonyms[0].Name)
	require.Equal(t, "log.retention.ms", c.ConfigSynonyms[1].Name)
	require.Equal(t, "2000", *c.ConfigSynonyms[1].Value)
	require.Equal(t, kmsg.ConfigSourceDynamicDefaultBrokerConfig, c.ConfigSynonyms[1].Source)
	require.Equal(t, "604800000", *c.ConfigSynonyms[2].Value)
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, c.ConfigSynonyms[2].Source)

	secret := &controllerv1.ConfigEntry{Name: "num.partitions", Value: &v, Sensitive: true, ReadOnly: true, Source: controllerv1.ConfigSource_CONFIG_SOURCE_STATIC_BROKER}
	c = configEntry(img, kmsg.ConfigResourceTypeBroker, "1", secret, true, false)
	require.Nil(t, c.Value, "sensitive values are hidden")
	require.True(t, c.IsSensitive)
	require.True(t, c.ReadOnly)
	require.Nil(t, c.Documentation)
	require.Empty(t, c.ConfigSynonyms)
	require.Equal(t, kmsg.ConfigTypeInt, c.ConfigType)

	cfgs := createdConfigs(map[string]string{"cleanup.policy": "compact"}, map[string]string{"log.retention.ms": "5"})
	bySource := map[string]int8{}
	for _, c := range cfgs {
		bySource[c.Name] = c.Source
	}
	require.Equal(t, int8(kmsg.ConfigSourceDynamicTopicConfig), bySource["cleanup.policy"])
	require.Equal(t, int8(kmsg.ConfigSourceDynamicDefaultBrokerConfig), bySource["retention.ms"])
	require.Equal(t, int8(kmsg.ConfigSourceDefaultConfig), bySource["segment.ms"])
}

func TestItemMessage(t *testing.T) {
	err := &errs.Error{Code: errs.InvalidTopic, Message: "topics[0].name: topic name is empty",
		Violations: []*edpb.FieldViolation{{Field: "topics[0].name", Description: "topic name is empty"}}}
	require.True(t, splitRejected(err))
	require.Equal(t, "name: topic name is empty", errs.From(itemMessage(err)).Message)
	err.Violations = []*edpb.FieldViolation{{Field: "names[0]", Description: "bad"}}
	require.Equal(t, "bad", errs.From(itemMessage(err)).Message)
	require.False(t, splitRejected(errs.New(errs.NotController, "x")))

	code, msg := kafkaError(errs.New(errs.NodeUnreachable, "gone"))
	require.Equal(t, int16(errs.RequestTimedOut), code, "retriable Sluice-only codes are answered with a code Kafka clients retry")
	require.Equal(t, "gone", *msg)
	code, _ = kafkaError(errs.New(errs.UnknownServerError, "boom"))
	require.Equal(t, int16(-1), code)
	code, msg = kafkaError(nil)
	require.Zero(t, code)
	require.Nil(t, msg)
}
