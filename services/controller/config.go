package controller

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/libs/metastore"
)

// Config configures the controller role.
type Config struct {
	// Etcd configures the metadata store.
	Etcd metastore.Config
	// ElectionTTL is the lease of the active controller: when it dies, a
	// standby takes over within this time.
	ElectionTTL time.Duration
	// SessionTimeout is how long a node stays registered without a heartbeat
	// (Kafka's broker.session.timeout.ms).
	SessionTimeout time.Duration
	// HeartbeatInterval is how often nodes heartbeat
	// (broker.heartbeat.interval.ms).
	HeartbeatInterval time.Duration
	// LeaderImbalanceCheckInterval is how often the active controller checks
	// whether preferred leaders should take leadership back
	// (leader.imbalance.check.interval.seconds); 0 disables it
	// (auto.leader.rebalance.enable=false).
	LeaderImbalanceCheckInterval time.Duration
	// LeaderImbalancePercentage is the share of a node's preferred
	// partitions it may fail to lead before a rebalance
	// (leader.imbalance.per.broker.percentage).
	LeaderImbalancePercentage int
	// DefaultPartitions and DefaultReplicationFactor apply when a topic is
	// created without them (num.partitions, default.replication.factor).
	DefaultPartitions        int
	DefaultReplicationFactor int
}

// RegisterFlags registers the controller flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Etcd.RegisterFlags("controller.etcd.", fs)
	fs.DurationVar(&c.ElectionTTL, "controller.election-ttl", 2*time.Second,
		"Lease of the active controller; a standby takes over within about this time after it dies.")
	fs.DurationVar(&c.SessionTimeout, "controller.session-timeout", 9*time.Second,
		"How long a node stays alive without a heartbeat before it is fenced (broker.session.timeout.ms).")
	fs.DurationVar(&c.HeartbeatInterval, "controller.heartbeat-interval", 2*time.Second,
		"How often nodes heartbeat (broker.heartbeat.interval.ms).")
	fs.DurationVar(&c.LeaderImbalanceCheckInterval, "controller.leader-imbalance-check-interval", 5*time.Minute,
		"How often to move leadership back to preferred replicas when leadership is imbalanced; 0 disables it.")
	fs.IntVar(&c.LeaderImbalancePercentage, "controller.leader-imbalance-percentage", 10,
		"Share (percent) of a node's preferred partitions it may fail to lead before leadership is rebalanced.")
	fs.IntVar(&c.DefaultPartitions, "controller.num-partitions", 1, "Partitions of a topic created without a count (num.partitions).")
	fs.IntVar(&c.DefaultReplicationFactor, "controller.default-replication-factor", 1,
		"Replication factor of a topic created without one (default.replication.factor).")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Etcd.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("controller.etcd: %w", err))
	}
	if c.ElectionTTL < time.Second || c.ElectionTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("controller.election-ttl: %v must be a whole number of seconds, at least 1s (etcd leases have second granularity)", c.ElectionTTL))
	}
	if c.HeartbeatInterval <= 0 {
		errs = append(errs, fmt.Errorf("controller.heartbeat-interval: %v must be positive", c.HeartbeatInterval))
	}
	if c.SessionTimeout < 2*c.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("controller.session-timeout: %v must be at least twice the heartbeat interval (%v)",
			c.SessionTimeout, c.HeartbeatInterval))
	}
	if c.LeaderImbalanceCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("controller.leader-imbalance-check-interval: %v is negative", c.LeaderImbalanceCheckInterval))
	}
	if c.LeaderImbalancePercentage < 0 || c.LeaderImbalancePercentage > 100 {
		errs = append(errs, fmt.Errorf("controller.leader-imbalance-percentage: %d is not between 0 and 100", c.LeaderImbalancePercentage))
	}
	if c.DefaultPartitions < 1 {
		errs = append(errs, fmt.Errorf("controller.num-partitions: %d must be at least 1", c.DefaultPartitions))
	}
	if c.DefaultReplicationFactor < 1 {
		errs = append(errs, fmt.Errorf("controller.default-replication-factor: %d must be at least 1", c.DefaultReplicationFactor))
	}
	return errors.Join(errs...)
}
