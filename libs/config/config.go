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
	"hash/fnv"
	"net"
	"os"
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
	// IDAuto (--node-id=auto) derives ID from the host name at Resolve:
	// for processes that keep no state under their id (coordinators,
	// replication workers), so identical replicas of one container spec
	// each get their own.
	IDAuto bool
	// IDOrdinal (--node-id=ordinal+N) makes ID, at Resolve, N plus the
	// number that ends the host name: a Kubernetes StatefulSet names its pods
	// <set>-<ordinal>, so each pod keeps its id (and the data stored under
	// it) across restarts, and the image needs no shell to do the sum.
	IDOrdinal bool
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
	n.ID = 1
	fs.Var((*nodeIDFlag)(n), "node-id",
		"Node id, unique in the cluster; auto derives one from the host name (for roles that keep no state under their id: coordinators, replication workers); ordinal+N is N plus the number ending the host name (a Kubernetes StatefulSet pod's <set>-<ordinal>).")
	fs.StringVar(&n.Rack, "rack", "", "Rack (failure domain) of this node, for rack-aware replica placement.")
	fs.StringVar(&n.DataDir, "data-dir", "./data", "Directory for everything this node stores.")
	fs.StringVar(&n.Listen, "listen", "127.0.0.1:9090", "host:port of the gRPC listener.")
	fs.StringVar(&n.Advertise, "advertise", "",
		"host:port that other nodes and clients dial; empty uses --listen. An empty or wildcard host (:9090, 0.0.0.0:9090) means this machine's address (what its host name resolves to).")
	fs.StringVar(&n.HTTPListen, "http-listen", "127.0.0.1:9091", "host:port serving /metrics and /debug/pprof; empty disables it.")
	fs.StringVar(&n.Controllers, "controllers", "",
		"Comma-separated gRPC addresses of the controllers; empty means this process runs the controller role.")
	fs.StringVar(&n.KafkaListen, "kafka-listen", "", "host:port of the Kafka-protocol listener; empty disables it.")
	fs.StringVar(&n.KafkaAdvertise, "kafka-advertise", "",
		"host:port that Kafka clients dial (the address metadata gives them); empty uses --kafka-listen. An empty or wildcard host means this machine's address.")
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

// nodeIDFlag parses --node-id: a number, auto, or ordinal+N (N kept in ID
// until Resolve adds the ordinal).
type nodeIDFlag Node

func (f *nodeIDFlag) String() string {
	if f == nil {
		return ""
	}
	if f.IDAuto {
		return "auto"
	}
	if f.IDOrdinal {
		return "ordinal+" + strconv.Itoa(f.ID)
	}
	return strconv.Itoa(f.ID)
}

func (f *nodeIDFlag) Set(v string) error {
	if v == "auto" {
		f.IDAuto, f.IDOrdinal = true, false
		return nil
	}
	if base, ok := strings.CutPrefix(v, "ordinal+"); ok {
		id, err := strconv.Atoi(base)
		if err != nil || id < 0 {
			return fmt.Errorf("%q: ordinal+N needs a number N >= 0", v)
		}
		f.ID, f.IDAuto, f.IDOrdinal = id, false, true
		return nil
	}
	id, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%q is neither a number, auto nor ordinal+N", v)
	}
	f.ID, f.IDAuto, f.IDOrdinal = id, false, false
	return nil
}

// HostOrdinal is the number that ends a host name after its last '-', as in
// a StatefulSet pod's <set>-<ordinal>.
func HostOrdinal(hostname string) (int, error) {
	i := strings.LastIndexByte(hostname, '-')
	digits := hostname[i+1:]
	if i < 0 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Errorf("host name %q does not end in -<number>", hostname)
	}
	return strconv.Atoi(digits)
}

// AutoIDBase is the smallest node id --node-id=auto yields: automatic ids
// come from the upper half of the valid range, [2^29, 2^30], away from the
// small ids operators give controllers and storage nodes.
const AutoIDBase = 1 << 29

// AutoID derives a node id from a host name: FNV-1a, folded into
// [AutoIDBase, 2^30). Container host names (Docker's are the container id)
// are unique and stay the same across a container's restarts, so a
// restarted process keeps its id; two names share an id with a chance of
// about n²/2^30 among n processes.
func AutoID(hostname string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(hostname)) // a hash.Hash never fails to write
	return AutoIDBase + int(h.Sum32()%AutoIDBase)
}

// Resolve fills in what the flags leave to the machine: the node id of
// --node-id=auto, and advertised addresses whose host is empty or a
// wildcard (from --advertise, or --listen when --advertise is empty; the
// same for the Kafka listener), which become this machine's address so
// that other processes can dial them. Call it once, after Validate.
func (n *Node) Resolve() error {
	return n.resolve(os.Hostname, net.LookupIP, net.InterfaceAddrs)
}

func (n *Node) resolve(hostname func() (string, error), lookup func(string) ([]net.IP, error), ifaces func() ([]net.Addr, error)) error {
	var host string
	var ip net.IP
	if n.IDAuto {
		h, err := hostname()
		if err != nil {
			return fmt.Errorf("node-id auto: reading the host name: %w", err)
		}
		n.ID, n.IDAuto = AutoID(h), false
	}
	if n.IDOrdinal {
		h, err := hostname()
		if err != nil {
			return fmt.Errorf("node-id ordinal: reading the host name: %w", err)
		}
		ord, err := HostOrdinal(h)
		if err != nil {
			return fmt.Errorf("node-id ordinal+%d: %w", n.ID, err)
		}
		if n.ID+ord > 1<<30 {
			return fmt.Errorf("node-id ordinal+%d: %d is outside 0..%d", n.ID, n.ID+ord, 1<<30)
		}
		n.ID, n.IDOrdinal = n.ID+ord, false
	}
	own := func(flag, addr string) (string, error) {
		h, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("%s: %q is not host:port", flag, addr)
		}
		if h != "" && !net.ParseIP(h).IsUnspecified() {
			return addr, nil
		}
		if ip == nil {
			if host == "" {
				if host, err = hostname(); err != nil {
					return "", fmt.Errorf("%s: %q needs this machine's address: reading the host name: %w", flag, addr, err)
				}
			}
			if ip, err = machineIP(host, lookup, ifaces); err != nil {
				return "", fmt.Errorf("%s: %q needs this machine's address: %w; set a host others can dial", flag, addr, err)
			}
		}
		return net.JoinHostPort(ip.String(), port), nil
	}
	var err error
	adv, flagName := n.Advertise, "advertise"
	if adv == "" {
		adv, flagName = n.Listen, "listen"
	}
	if n.Advertise, err = own(flagName, adv); err != nil {
		return err
	}
	if n.KafkaListen == "" {
		return nil
	}
	kadv, flagName := n.KafkaAdvertise, "kafka-advertise"
	if kadv == "" {
		kadv, flagName = n.KafkaListen, "kafka-listen"
		if _, port, _ := net.SplitHostPort(kadv); port == "0" {
			// The port is known once bound; the listener's own address
			// is advertised then.
			return nil
		}
	}
	n.KafkaAdvertise, err = own(flagName, kadv)
	return err
}

// machineIP is the address others reach this machine at: what its host
// name resolves to (a container's /etc/hosts names its address on its
// network), else its first global unicast interface address.
func machineIP(host string, lookup func(string) ([]net.IP, error), ifaces func() ([]net.Addr, error)) (net.IP, error) {
	if ips, err := lookup(host); err == nil {
		for _, ip := range ips {
			if ip.IsGlobalUnicast() {
				return ip, nil
			}
		}
	}
	addrs, err := ifaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() {
			return ipn.IP, nil
		}
	}
	return nil, fmt.Errorf("host name %q resolves to no routable address and no interface has one", host)
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
