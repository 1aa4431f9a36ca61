// Package config holds the configuration every Sluice process shares (its
// node identity and addresses) and helpers to compose per-component configs.
// Each component owns a Config with RegisterFlags and Validate; the server
// binary embeds them in one root config. Flags are named
// <component>.<kebab-name>, except the few every operator types (--roles,
// --node-id, --listen, --data-dir). Topic and broker settings keep Kafka's
// names (retention.ms, segment.bytes, min.insync.replicas, ...).
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Component is a configurable part of a process.
type Component interface {
	RegisterFlags(fs *flag.FlagSet)
	Validate() error
}

// ValidateAll validates components and joins their errors.
func ValidateAll(cs ...Component) error {
	var errs []error
	for _, c := range cs {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Node is a process's identity and addresses.
type Node struct {
	// ID is the node id, unique in the cluster (Kafka's broker.id / node.id).
	ID int
	// Rack is the failure domain, for rack-aware replica placement.
	Rack string
	// DataDir holds everything the node stores: logs, etcd, checkpoints.
	DataDir string
	// Listen is host:port of the gRPC listener.
	Listen string
	// Advertise is host:port other nodes and clients dial; empty uses Listen.
	Advertise string
	// HTTPListen is host:port of the HTTP listener for /metrics and
	// /debug/pprof; empty disables it.
	HTTPListen string
	// Controllers lists the gRPC addresses of the controller processes, for
	// nodes that do not run the controller role (or to find the others).
	Controllers string
	// KafkaListen is host:port of the Kafka-protocol listener; empty
	// disables it.
	KafkaListen string
	// KafkaAdvertise is host:port Kafka clients dial (the address metadata
	// hands them); empty uses KafkaListen.
	KafkaAdvertise string
}

// RegisterFlags registers the node flags.
func (n *Node) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&n.ID, "node-id", 1, "Node id, unique in the cluster.")
	fs.StringVar(&n.Rack, "rack", "", "Rack (failure domain) of this node, for rack-aware replica placement.")
	fs.StringVar(&n.DataDir, "data-dir", "./data", "Directory for everything this node stores.")
	fs.StringVar(&n.Listen, "listen", "127.0.0.1:9090", "host:port of the gRPC listener.")
	fs.StringVar(&n.Advertise, "advertise", "", "host:port that other nodes and clients dial; empty uses --listen.")
	fs.StringVar(&n.HTTPListen, "http-listen", "127.0.0.1:9091", "host:port serving /metrics and /debug/pprof; empty disables it.")
	fs.StringVar(&n.Controllers, "controllers", "",
		"Comma-separated gRPC addresses of the controllers; empty means this process runs the controller role.")
	fs.StringVar(&n.KafkaListen, "kafka-listen", "", "host:port of the Kafka-protocol listener; empty disables it.")
	fs.StringVar(&n.KafkaAdvertise, "kafka-advertise", "",
		"host:port that Kafka clients dial (the address metadata gives them); empty uses --kafka-listen.")
}

// Validate checks the node configuration.
func (n *Node) Validate() error {
	var errs []error
	if n.ID < 0 || n.ID > 1<<30 {
		errs = append(errs, fmt.Errorf("node-id: %d is outside 0..%d", n.ID, 1<<30))
	}
	if n.DataDir == "" {
		errs = append(errs, errors.New("data-dir: must be set"))
	}
	if err := CheckHostPort("listen", n.Listen); err != nil {
		errs = append(errs, err)
	}
	if n.Advertise != "" {
		if err := CheckHostPort("advertise", n.Advertise); err != nil {
			errs = append(errs, err)
		}
	}
	if n.HTTPListen != "" {
		if err := CheckHostPort("http-listen", n.HTTPListen); err != nil {
			errs = append(errs, err)
		}
	}
	if n.KafkaListen != "" {
		if err := CheckHostPort("kafka-listen", n.KafkaListen); err != nil {
			errs = append(errs, err)
		}
	}
	if n.KafkaAdvertise != "" {
		if n.KafkaListen == "" {
			errs = append(errs, errors.New("kafka-advertise: set without --kafka-listen"))
		} else if err := CheckHostPort("kafka-advertise", n.KafkaAdvertise); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range n.ControllerAddrs() {
		if err := CheckHostPort("controllers", c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// AdvertiseAddr returns the address others should dial.
func (n *Node) AdvertiseAddr() string {
	if n.Advertise != "" {
		return n.Advertise
	}
	return n.Listen
}

// ControllerAddrs splits Controllers.
func (n *Node) ControllerAddrs() []string { return SplitList(n.Controllers) }

// SplitList splits a comma-separated list, dropping empty entries.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CheckHostPort checks that v is host:port with a numeric port.
func CheckHostPort(name, v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port", name, v)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%s: %q has no valid port", name, v)
	}
	return nil
}
