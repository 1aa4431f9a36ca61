// Package assign holds the client-side assignors of Kafka's classic
// consumer-group protocol: the group leader runs one of them on the members
// of a JoinGroup response and sends the result in SyncGroup.
//
// The four assignors are Kafka's own, under Kafka's protocol names, so a
// group can mix this SDK's consumers with Java, librdkafka or franz-go
// consumers:
//   - Range: per topic, contiguous ranges of partitions.
//   - RoundRobin: all partitions dealt out one by one.
//   - Sticky: balanced, and keeps as many partitions where they were as it
//     can (KIP-54, KIP-341); members rebalance eagerly.
//   - CooperativeSticky: Sticky with incremental cooperative rebalancing
//     (KIP-429): a partition moves in two rebalances, revoked by its old
//     owner in the first and assigned to its new one in the second, so no
//     member stops consuming what it keeps.
//
// EncodeSubscription and DecodeSubscription read and write the
// ConsumerProtocol subscription (the JoinGroup protocol metadata) with the
// user data each assignor carries; EncodeAssignment and DecodeAssignment
// the SyncGroup member assignment. Their byte layout is Kafka's, read and
// written with github.com/twmb/franz-go/pkg/kmsg.
//
// A round as the leader runs it:
//
//	a, _ := assign.ByName(protocolChosenByCoordinator)
//	var members []assign.Member
//	for _, jm := range joinResponse.Members {
//		m, err := assign.DecodeSubscription(jm.MemberID, instanceID(jm), jm.ProtocolMetadata)
//		...
//		members = append(members, m)
//	}
//	plan := a.Assign(members, partitionCounts)
//	for id, topics := range plan {
//		syncAssignments[id] = assign.EncodeAssignment(topics, nil)
//	}
package assign
