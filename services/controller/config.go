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
}

// RegisterFlags registers the controller flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Etcd.RegisterFlags("controller.etcd.", fs)
	fs.DurationVar(&c.ElectionTTL, "controller.election-ttl", 3*time.Second,
		"Lease of the active controller; a standby takes over within about this time after it dies.")
	fs.DurationVar(&c.SessionTimeout, "controller.session-timeout", 9*time.Second,
		"How long a node stays alive without a heartbeat before it is fenced (broker.session.timeout.ms).")
	fs.DurationVar(&c.HeartbeatInterval, "controller.heartbeat-interval", 2*time.Second,
		"How often nodes heartbeat (broker.heartbeat.interval.ms).")
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
	return errors.Join(errs...)
}
