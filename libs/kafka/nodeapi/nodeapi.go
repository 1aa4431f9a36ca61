package nodeapi

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
)

// Versions served, per API key. Each range is one the handlers answer
// completely: clients pick the highest version both sides support, so a
// version listed here with a field left unanswered would break real clients.
const (
	metadataMin, metadataMax                 = 1, 12 // v13 adds a top-level error code only brokers of Kafka 4 send
	findCoordinatorMin, findCoordinatorMax   = 0, 5  // v6 adds share-group keys (KIP-932)
	describeClusterMin, describeClusterMax   = 0, 2
	createTopicsMin, createTopicsMax         = 0, 7
	deleteTopicsMin, deleteTopicsMax         = 0, 6
	createPartitionsMin, createPartitionsMax = 0, 3
	describeConfigsMin, describeConfigsMax   = 0, 4
	alterConfigsMin, alterConfigsMax         = 0, 2
	incAlterConfigsMin, incAlterConfigsMax   = 0, 1
	electLeadersMin, electLeadersMax         = 0, 2
	alterReassignMin, alterReassignMax       = 0, 1
	listReassignMin, listReassignMax         = 0, 0
)

// Deps is what the node APIs need of their process.
type Deps struct {
	// Metadata is the process's metadata cache; Metadata, DescribeCluster
	// and every address in an answer come from it.
	Metadata *metadata.Cache
	// Pool holds the process's gRPC connections to other nodes (the active
	// controller, the group coordinators).
	Pool *wire.Pool
	// NodeID is this process's node id.
	NodeID int32
	// Logger receives warnings about forwarded calls; nil discards them.
	Logger *slog.Logger
	// DefaultTimeout bounds a forwarded call whose request carries no
	// timeout of its own (FindCoordinator); zero means 30 s.
	DefaultTimeout time.Duration
	// Authz authorizes each request for the Kafka client that sent it,
	// before anything is forwarded (the controller sees this process's
	// identity, not the client's). Nil allows everything.
	Authz authz.Authorizer
}

// node serves the node APIs of one process.
type node struct {
	cache   *metadata.Cache
	pool    *wire.Pool
	nodeID  int32
	logger  *slog.Logger
	timeout time.Duration
	authz   authz.Authorizer
}

// Register registers on mux the Kafka APIs every Sluice process answers,
// whatever its roles: Metadata, FindCoordinator, DescribeCluster, and the
// admin APIs, which it forwards to the active controller over gRPC.
func Register(mux *kafka.Mux, d Deps) {
	n := &node{cache: d.Metadata, pool: d.Pool, nodeID: d.NodeID, logger: d.Logger, timeout: d.DefaultTimeout, authz: d.Authz}
	if n.authz == nil {
		n.authz = authz.AllowAll{}
	}
	if n.logger == nil {
		n.logger = slog.New(slog.DiscardHandler)
	}
	if n.timeout <= 0 {
		n.timeout = 30 * time.Second
	}
	mux.Handle(kmsg.Metadata.Int16(), metadataMin, metadataMax, typed(n.metadata))
	mux.Handle(kmsg.FindCoordinator.Int16(), findCoordinatorMin, findCoordinatorMax, typed(n.findCoordinator))
	mux.Handle(kmsg.DescribeCluster.Int16(), describeClusterMin, describeClusterMax, typed(n.describeCluster))

	mux.Handle(kmsg.CreateTopics.Int16(), createTopicsMin, createTopicsMax, typed(n.createTopics))
	mux.Handle(kmsg.DeleteTopics.Int16(), deleteTopicsMin, deleteTopicsMax, typed(n.deleteTopics))
	mux.Handle(kmsg.CreatePartitions.Int16(), createPartitionsMin, createPartitionsMax, typed(n.createPartitions))
	mux.Handle(kmsg.DescribeConfigs.Int16(), describeConfigsMin, describeConfigsMax, typed(n.describeConfigs))
	mux.Handle(kmsg.AlterConfigs.Int16(), alterConfigsMin, alterConfigsMax, typed(n.alterConfigs))
	mux.Handle(kmsg.IncrementalAlterConfigs.Int16(), incAlterConfigsMin, incAlterConfigsMax, typed(n.incrementalAlterConfigs))
	mux.Handle(kmsg.ElectLeaders.Int16(), electLeadersMin, electLeadersMax, typed(n.electLeaders))
	mux.Handle(kmsg.AlterPartitionAssignments.Int16(), alterReassignMin, alterReassignMax, typed(n.alterPartitionReassignments))
	mux.Handle(kmsg.ListPartitionReassignments.Int16(), listReassignMin, listReassignMax, typed(n.listPartitionReassignments))
	mux.Handle(kmsg.DescribeUserSCRAMCredentials.Int16(), describeScramMin, describeScramMax, typed(n.describeUserScram))
	mux.Handle(kmsg.AlterUserSCRAMCredentials.Int16(), alterScramMin, alterScramMax, typed(n.alterUserScram))
	// Client quotas (KIP-546), kept by the controller; every process
	// enforces them from its metadata.
	mux.Handle(kmsg.DescribeClientQuotas.Int16(), describeQuotasMin, describeQuotasMax, typed(n.describeClientQuotas))
	mux.Handle(kmsg.AlterClientQuotas.Int16(), alterQuotasMin, alterQuotasMax, typed(n.alterClientQuotas))

	// ACL administration (KIP-140), forwarded to the active controller,
	// which stores ACLs in the metadata quorum; every process's authorizer
	// receives them with its metadata.
	mux.Handle(kmsg.DescribeACLs.Int16(), describeACLsMin, describeACLsMax, typed(n.describeACLs))
	mux.Handle(kmsg.CreateACLs.Int16(), createACLsMin, createACLsMax, typed(n.createACLs))
	mux.Handle(kmsg.DeleteACLs.Int16(), deleteACLsMin, deleteACLsMax, typed(n.deleteACLs))
}

// typed adapts a handler of one request type to a kafka.Handler. The mux
// routes by API key, so the type always matches; a mismatch is a
// programming error and closes the connection.
func typed[Req kmsg.Request, Resp kmsg.Response](h func(ctx context.Context, req Req) Resp) kafka.Handler {
	return func(ctx context.Context, r *kafka.Request) (kafka.Reply, error) {
		req, ok := r.Msg.(Req)
		if !ok {
			return kafka.Reply{}, errWrongType{key: r.Key}
		}
		resp := h(ctx, req)
		resp.SetVersion(r.Version)
		return kafka.Now(resp), nil
	}
}

type errWrongType struct{ key int16 }

func (e errWrongType) Error() string {
	return "kafka: request of API key " + kmsg.NameForKey(e.key) + " has an unexpected type"
}

// callTimeout is how long a forwarded call may take: the request's own
// timeout when it has one (admin requests carry TimeoutMillis), else the
// default; never past ctx's deadline.
func (n *node) callTimeout(ctx context.Context, timeoutMillis int32) (context.Context, context.CancelFunc) {
	d := n.timeout
	if timeoutMillis > 0 {
		d = time.Duration(timeoutMillis) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
}
