package metastore

import (
	"fmt"
	"strconv"
	"strings"
)

// The key schema, under the store's prefix. Values are protobuf messages
// from gen/go unless noted. Keeping every key here makes the layout of
// Sluice's metadata reviewable in one place.
//
//	cluster/id                      cluster id (string)
//	controller/leader/<lease>       election key of the active controller (node id)
//	controller/epoch                controller epoch (decimal string)
//	controllers/<node-id>           controller presence, leased (controller.v1.ControllerMember)
//	brokers/<node-id>               registered node (metastore.v1.BrokerRecord)
//	broker-epoch                    last broker epoch handed out (decimal string)
//	topics/<name>                   topic (metastore.v1.TopicRecord)
//	partitions/<topic>/<partition>  partition state (metastore.v1.PartitionRecord)
//	configs/broker/<id|default>     dynamic broker configs (metastore.v1.ConfigRecord)
//	producer-ids/next               next unallocated producer id (decimal string)
//	users/scram/<user>              a user's SCRAM credentials (controller.v1.UserScramCredentials)
//	acls/<id>                       one ACL (controller.v1.AclBinding); id hashes its fields
//	quotas/<id>                     one entity's client quotas (controller.v1.ClientQuotaEntry); id hashes the entity
const (
	KeyClusterID        = "cluster/id"
	KeyControllerLeader = "controller/leader"
	KeyControllerEpoch  = "controller/epoch"
	PrefixControllers   = "controllers/"
	PrefixBrokers       = "brokers/"
	KeyBrokerEpoch      = "broker-epoch"
	PrefixTopics        = "topics/"
	PrefixPartitions    = "partitions/"
	PrefixBrokerConfigs = "configs/broker/"
	KeyProducerIDNext   = "producer-ids/next"
	PrefixScramUsers    = "users/scram/"
	PrefixACLs          = "acls/"
	PrefixQuotas        = "quotas/"
)

// QuotaKey is the key of one entity's client quotas.
func QuotaKey(id string) string { return PrefixQuotas + id }

// ACLKey is the key of one ACL.
func ACLKey(id string) string { return PrefixACLs + id }

// ScramUserKey is the key of a user's SCRAM credentials.
func ScramUserKey(user string) string { return PrefixScramUsers + user }

// ControllerKey is the presence key of a controller.
func ControllerKey(nodeID int32) string { return PrefixControllers + strconv.Itoa(int(nodeID)) }

// BrokerKey is the registration key of a node.
func BrokerKey(nodeID int32) string { return PrefixBrokers + strconv.Itoa(int(nodeID)) }

// BrokerConfigKey is the key of a node's dynamic configs; id < 0 is the
// default for every node.
func BrokerConfigKey(nodeID int32) string {
	if nodeID < 0 {
		return PrefixBrokerConfigs + "default"
	}
	return PrefixBrokerConfigs + strconv.Itoa(int(nodeID))
}

// TopicKey is the key of a topic.
func TopicKey(name string) string { return PrefixTopics + name }

// PartitionKey is the key of one partition's state.
func PartitionKey(topic string, partition int32) string {
	return fmt.Sprintf("%s%s/%d", PrefixPartitions, topic, partition)
}

// PartitionsPrefix is the prefix of every partition of a topic.
func PartitionsPrefix(topic string) string { return PrefixPartitions + topic + "/" }

// ParsePartitionKey splits a partition key (without the store prefix).
func ParsePartitionKey(key string) (topic string, partition int32, ok bool) {
	rest, found := strings.CutPrefix(key, PrefixPartitions)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, false
	}
	return rest[:i], int32(p), true
}
