package app

import (
	"errors"
	"flag"
	"fmt"

	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/quota"
	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/telemetry"
	"github.com/sluice-io/sluice/libs/tlsx"
	"github.com/sluice-io/sluice/services/controller"
	"github.com/sluice-io/sluice/services/groupcoord"
	"github.com/sluice-io/sluice/services/replication"
	"github.com/sluice-io/sluice/services/storagenode"
	"github.com/sluice-io/sluice/services/txncoord"
)

// Config is the root configuration of sluiced: shared parts plus one Config
// per role. Only the configs of the roles a process runs are validated.
type Config struct {
	Roles     role.Set
	Node      config.Node
	Log       log.Config
	Telemetry telemetry.Config
	GRPC      grpcx.ServerConfig
	Kafka     kafka.Config
	TLS       tlsx.Config
	Auth      authn.Config
	AuthLimit authn.LimitConfig
	Authz     authz.Flags
	Quota     quota.Config
	Unsafe    UnsafeConfig

	Controller             controller.Config
	StorageNode            storagenode.Config
	Replication            replication.Config
	GroupCoordinator       groupcoord.Config
	TransactionCoordinator txncoord.Config
}

// RegisterFlags registers every flag of sluiced.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Roles = role.All
	fs.Var(&c.Roles, "roles", fmt.Sprintf("Roles this process runs, comma-separated: %v.", role.Names()))
	for _, comp := range c.components() {
		comp.RegisterFlags(fs)
	}
	for _, comp := range c.roleComponents() {
		comp.RegisterFlags(fs)
	}
}

func (c *Config) components() []config.Component {
	return []config.Component{&c.Node, &c.Log, &c.Telemetry, &c.GRPC, &c.Kafka, &c.TLS, &c.Auth, &c.AuthLimit, &c.Authz, &c.Quota, &c.Unsafe}
}

func (c *Config) roleComponents() map[role.Role]config.Component {
	return map[role.Role]config.Component{
		role.Controller:             &c.Controller,
		role.StorageNode:            &c.StorageNode,
		role.Replication:            &c.Replication,
		role.GroupCoordinator:       &c.GroupCoordinator,
		role.TransactionCoordinator: &c.TransactionCoordinator,
	}
}

// Validate checks the shared configuration and that of each role this
// process runs.
func (c *Config) Validate() error {
	errs := []error{config.ValidateAll(c.components()...)}
	roleComps := c.roleComponents()
	for _, r := range c.Roles {
		errs = append(errs, roleComps[r].Validate())
	}
	if len(c.Roles) == 0 {
		errs = append(errs, errors.New("roles: at least one role is required"))
	}
	if c.Authz.Enabled && (!c.TLS.Enabled() || c.TLS.CA == "") {
		// Processes call each other (registration, metadata watch,
		// replication); with ACLs on, they are let through by the role
		// URI SANs of their certificates, so without mutual TLS no process
		// but a lone controller could start.
		errs = append(errs, errors.New("authz.enabled: requires --tls.cert, --tls.key and --tls.ca, with role certificates (sluice certs): processes prove their roles to each other with them"))
	}
	errs = append(errs, c.Kafka.PlainWithoutTLSError(c.TLS.Enabled()))
	if !c.Roles.Has(role.Controller) && len(c.Node.ControllerAddrs()) == 0 {
		errs = append(errs, errors.New("controllers: required when this process does not run the controller role"))
	}
	return errors.Join(errs...)
}
