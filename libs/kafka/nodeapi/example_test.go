package nodeapi_test

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/kafka/nodeapi"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Register puts the node APIs on a process's mux; ApiVersions then lists
// them with the versions served.
func ExampleRegister() {
	mux := kafka.NewMux()
	pool := wire.NewPool(wire.ClientOptions{})
	defer pool.Close()
	nodeapi.Register(mux, nodeapi.Deps{Metadata: metadata.NewCache(), Pool: pool, NodeID: 1})
	for _, v := range mux.Versions() {
		fmt.Printf("%s v%d-v%d\n", kmsg.NameForKey(v.ApiKey), v.MinVersion, v.MaxVersion)
	}
	// Output:
	// Metadata v1-v12
	// FindCoordinator v0-v5
	// CreateTopics v0-v7
	// DeleteTopics v0-v6
	// DescribeACLs v0-v3
	// CreateACLs v0-v3
	// DeleteACLs v0-v3
	// DescribeConfigs v0-v4
	// AlterConfigs v0-v2
	// CreatePartitions v0-v3
	// ElectLeaders v0-v2
	// IncrementalAlterConfigs v0-v1
	// AlterPartitionAssignments v0-v1
	// ListPartitionReassignments v0-v0
	// DescribeClientQuotas v0-v1
	// AlterClientQuotas v0-v1
	// DescribeUserSCRAMCredentials v0-v0
	// AlterUserSCRAMCredentials v0-v0
	// DescribeCluster v0-v2
}
