package service

import (
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/membership"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/quota"
	"github.com/sluice-io/sluice/libs/replica"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// Deps is what a process hands each of its roles: one struct for every role
// (each role's New takes it), built once by the process, so a role uses what
// it needs and a new role needs no new plumbing. Roles share these; none
// owns or closes them.
type Deps struct {
	Logger    *slog.Logger
	Telemetry *telemetry.Providers
	// Server is the process's one gRPC server; roles register on it.
	Server *grpcx.Server
	// Kafka is the process's Kafka-protocol mux; roles register the API
	// keys they serve on it. Never nil (a process without a Kafka listener
	// registers anyway and nothing is served).
	Kafka *kafka.Mux
	Node  config.Node
	// Metadata is the process's view of cluster metadata.
	Metadata *metadata.Cache
	// Member registers the process with the controller; nil in a process
	// that runs only the controller role.
	Member *membership.Member
	// Pool holds the process's client connections to other nodes.
	Pool *wire.Pool
	// Replicas are the process's partition replicas, shared by the
	// storage-node and replication roles; nil when the process runs no
	// storage-node role (a replication worker then fetches for remote
	// followers).
	Replicas *replica.Manager
	// Now is the wall clock of the roles' timing decisions: group sessions
	// and rebalance timeouts, transaction timeouts, the timestamps the
	// storage node stamps on records it builds and on transaction markers.
	// nil means time.Now; --unsafe.fault-injection shifts it.
	Now func() time.Time
	// Authz decides every client call's access, the same for gRPC and
	// Kafka requests (the caller's identity is in the request context, see
	// libs/auth). Nil means authorization is off (see Authorizer).
	Authz authz.Authorizer
	// Quotas enforces client quotas on the data path (producer and
	// consumer byte rates, request time); nil enforces none.
	Quotas *quota.Manager
}

// Authorizer returns Authz, or authz.AllowAll when it is nil.
func (d Deps) Authorizer() authz.Authorizer {
	if d.Authz != nil {
		return d.Authz
	}
	return authz.AllowAll{}
}

// Clock returns Now, or time.Now when it is nil.
func (d Deps) Clock() func() time.Time {
	if d.Now != nil {
		return d.Now
	}
	return time.Now
}
