// Package netns builds networks out of Linux network namespaces for fault
// injection: a bridge in the caller's own namespace, and one namespace (one
// address) per host joined to it by a veth pair. Each process of a cluster
// runs in a host of its own; Isolate cuts a host off from others with
// nftables rules inside its namespace, silently (packets are dropped,
// connections hang rather than being refused), while the caller, on the
// bridge, still reaches every host. Traffic never leaves the machine. It
// needs root (CAP_NET_ADMIN), iproute2 and nftables.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// maxHosts bounds a network: host addresses are .10 to .209 of one /24.
const maxHosts = 200

// ifNameMax is the longest Linux interface name (IFNAMSIZ - 1).
const ifNameMax = 15

// Names are the prefixes a network's bridge, namespaces, veths, addresses
// and nftables table are named with. Users that may run at the same time on
// one machine (a chaos run and an integration test, say) give different
// ones, so that their networks never meet.
type Names struct {
	// Bridge starts the bridge's name; four random hex digits (the
	// network's id) follow.
	Bridge string
	// Host starts each namespace's name, <Host><id>-<i>, and veth's,
	// <Host><id>v<i>.
	Host string
	// Subnet is the first two octets of the network's /24, such as
	// "10.232"; the third is random, the bridge is .1 and host i is .(10+i).
	Subnet string
	// Table is the nftables table that holds a host's partition rules.
	Table string
}

func (n Names) validate() error {
	const idLen = 4
	switch {
	case n.Bridge == "" || n.Host == "" || n.Table == "":
		return errors.New("network names need a bridge, host and table prefix")
	case len(n.Bridge)+idLen > ifNameMax:
		return fmt.Errorf("bridge prefix %q is too long for an interface name (at most %d characters)", n.Bridge, ifNameMax-idLen)
	case len(n.Host)+idLen+len("v199p") > ifNameMax:
		// A veth's peer is named <veth>p until it is renamed in its namespace.
		return fmt.Errorf("host prefix %q is too long for an interface name (at most %d characters)", n.Host, ifNameMax-idLen-len("v199p"))
	case strings.ContainsAny(n.Bridge+n.Host+n.Table, " \t\n/{};"):
		return fmt.Errorf("network names %q, %q, %q hold a space or one of /{};", n.Bridge, n.Host, n.Table)
	}
	octets := strings.Split(n.Subnet, ".")
	if len(octets) != 2 {
		return fmt.Errorf("subnet %q is not two octets such as 10.232", n.Subnet)
	}
	for _, o := range octets {
		if v, err := strconv.Atoi(o); err != nil || v < 0 || v > 255 {
			return fmt.Errorf("subnet %q is not two octets such as 10.232", n.Subnet)
		}
	}
	return nil
}

// Net is a bridge with hosts. Close removes it.
type Net struct {
	names  Names
	id     string
	bridge string
	subnet string // first three octets, such as "10.232.17"
	// Hosts are the namespaces, in order.
	Hosts []Host
	// forwardRule is set when an iptables FORWARD rule was added for the
	// bridge.
	forwardRule bool
}

// Host is one network namespace with one address.
type Host struct {
	NS   string
	IP   string
	veth string
}

// Available reports whether network namespaces can be made here, and if
// not, why.
func Available() error {
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (Debian packages iproute2 and nftables)", tool)
		}
	}
	name := "slnp" + randHex(3)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("cannot create a network namespace (needs root / CAP_NET_ADMIN): %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", name).Run() // a probe only
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}

func sh(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// New makes a bridge and n hosts named after names. On error, whatever was
// made is removed.
func New(n int, names Names) (*Net, error) {
	if n < 1 || n > maxHosts {
		return nil, fmt.Errorf("a network holds 1 to %d hosts, not %d", maxHosts, n)
	}
	if err := names.validate(); err != nil {
		return nil, err
	}
	id := randHex(2)
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	nt := &Net{names: names, id: id, bridge: names.Bridge + id, subnet: fmt.Sprintf("%s.%d", names.Subnet, b[0])}
	if err := nt.build(n); err != nil {
		nt.Close()
		return nil, err
	}
	return nt, nil
}

func (nt *Net) build(n int) error {
	for _, cmd := range [][]string{
		{"ip", "link", "add", nt.bridge, "type", "bridge"},
		{"ip", "addr", "add", nt.subnet + ".1/24", "dev", nt.bridge},
		{"ip", "link", "set", nt.bridge, "up"},
	} {
		if err := sh(cmd...); err != nil {
			return err
		}
	}
	// With br_netfilter loaded (Docker loads it and sets the FORWARD
	// policy to DROP), bridged packets pass the FORWARD chain: let this
	// bridge's through.
	if _, err := exec.LookPath("iptables"); err == nil {
		if exec.Command("iptables", "-I", "FORWARD", "1", "-i", nt.bridge, "-o", nt.bridge, "-j", "ACCEPT").Run() == nil {
			nt.forwardRule = true
		}
	}
	prefix := nt.names.Host + nt.id
	for i := range n {
		h := Host{NS: fmt.Sprintf("%s-%d", prefix, i), IP: fmt.Sprintf("%s.%d", nt.subnet, 10+i), veth: fmt.Sprintf("%sv%d", prefix, i)}
		nt.Hosts = append(nt.Hosts, h)
		peer := h.veth + "p"
		for _, cmd := range [][]string{
			{"ip", "netns", "add", h.NS},
			{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer},
			{"ip", "link", "set", h.veth, "master", nt.bridge},
			{"ip", "link", "set", h.veth, "up"},
			{"ip", "link", "set", peer, "netns", h.NS},
			{"ip", "netns", "exec", h.NS, "ip", "link", "set", "lo", "up"},
			{"ip", "netns", "exec", h.NS, "ip", "link", "set", peer, "name", "eth0"},
			{"ip", "netns", "exec", h.NS, "ip", "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"ip", "netns", "exec", h.NS, "ip", "link", "set", "eth0", "up"},
		} {
			if err := sh(cmd...); err != nil {
				return err
			}
		}
	}
	return nil
}

// IPs returns every host's address, in order (devcluster.Spec.Hosts).
func (nt *Net) IPs() []string {
	out := make([]string, len(nt.Hosts))
	for i, h := range nt.Hosts {
		out[i] = h.IP
	}
	return out
}

// Exec returns the command prefix that runs a program in host i
// (devcluster.Spec.Wrap).
func (nt *Net) Exec(i int) []string { return []string{"ip", "netns", "exec", nt.Hosts[i].NS} }

// Isolate drops every packet between host i and the hosts in from, both
// ways. The bridge (the caller) stays reachable.
func (nt *Net) Isolate(i int, from []int) error {
	if i < 0 || i >= len(nt.Hosts) {
		return fmt.Errorf("no host %d", i)
	}
	if len(from) == 0 {
		return errors.New("isolating from no host")
	}
	var ips []string
	for _, j := range from {
		if j < 0 || j >= len(nt.Hosts) || j == i {
			return fmt.Errorf("cannot isolate host %d from host %d", i, j)
		}
		ips = append(ips, nt.Hosts[j].IP)
	}
	set := "{ " + strings.Join(ips, ", ") + " }"
	script := fmt.Sprintf(`table inet %s {
  chain in { type filter hook input priority 0; policy accept; ip saddr %s drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr %s drop; }
}`, nt.names.Table, set, set)
	cmd := exec.Command("ip", "netns", "exec", nt.Hosts[i].NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("isolating host %d: %v: %s", i, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Disconnect drops every packet to and from host i except its loopback
// traffic, the bridge (the caller) included: the host is off the network,
// as a container is after docker network disconnect. Connections hang;
// nothing is refused. Heal ends it.
func (nt *Net) Disconnect(i int) error {
	if i < 0 || i >= len(nt.Hosts) {
		return fmt.Errorf("no host %d", i)
	}
	script := fmt.Sprintf(`table inet %s {
  chain in { type filter hook input priority 0; policy accept; iifname != "lo" drop; }
  chain out { type filter hook output priority 0; policy accept; oifname != "lo" drop; }
}`, nt.names.Table)
	cmd := exec.Command("ip", "netns", "exec", nt.Hosts[i].NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("disconnecting host %d: %v: %s", i, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Heal removes host i's partition rules.
func (nt *Net) Heal(i int) error {
	if i < 0 || i >= len(nt.Hosts) {
		return fmt.Errorf("no host %d", i)
	}
	return sh("ip", "netns", "exec", nt.Hosts[i].NS, "nft", "delete", "table", "inet", nt.names.Table)
}

// Close removes the namespaces, veths and bridge.
func (nt *Net) Close() {
	for _, h := range nt.Hosts {
		_ = exec.Command("ip", "netns", "del", h.NS).Run() // takes its veth end along
		_ = exec.Command("ip", "link", "del", h.veth).Run()
	}
	if nt.forwardRule {
		_ = exec.Command("iptables", "-D", "FORWARD", "-i", nt.bridge, "-o", nt.bridge, "-j", "ACCEPT").Run()
	}
	_ = exec.Command("ip", "link", "del", nt.bridge).Run()
}
