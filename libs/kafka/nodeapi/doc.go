// Package nodeapi serves the Kafka APIs that every Sluice process answers,
// whatever roles it runs, as every Kafka broker does:
//
//   - Metadata and DescribeCluster, from the process's metadata cache: the
//     nodes are those with a Kafka listener (metadata.KafkaEndpoint), the
//     partitions those the controller records, with leaders, epochs,
//     replicas and ISR;
//   - FindCoordinator, asked of a group-coordinator process over gRPC and
//     answered with the coordinator's Kafka listener;
//   - the admin APIs (CreateTopics, DeleteTopics, CreatePartitions,
//     DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, ElectLeaders,
//     AlterPartitionReassignments, ListPartitionReassignments), converted to
//     the controller's gRPC calls and forwarded to the active controller,
//     following its NOT_CONTROLLER hints.
//
// Every answer carries per-item Kafka error codes from the error catalog
// (libs/client/errs, whose numbers are Kafka's) with a message where the
// version has a field for one. A request the controller's validators refuse
// as a whole for one bad item is sent again item by item, so each item gets
// its own answer, as Kafka gives it.
//
// sluiced calls Register once per process, on the process's kafka.Mux,
// before the listener starts.
package nodeapi
