package nemesis

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Net is a bridge in the caller's network namespace with one namespace
// (one address) per cluster process joined to it by a veth pair. The caller
// reaches every process through the bridge; Isolate cuts processes off from
// each other with nftables rules inside a namespace, silently (packets are
// dropped, connections hang). It needs root (CAP_NET_ADMIN), iproute2 and
// nftables. Close removes everything.
type Net struct {
	id     string
	bridge string
	subnet string
	// Hosts are the namespaces, in process order.
	Hosts       []NetHost
	forwardRule bool
}

// NetHost is one namespace with its address.
type NetHost struct {
	NS   string
	IP   string
	veth string
}

// NetAvailable reports whether network namespaces can be made here, and if
// not, why.
func NetAvailable() error {
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

// NewNet makes a bridge and n namespaces. On error, whatever was made is
// removed.
func NewNet(n int) (*Net, error) {
	if n < 1 || n > 200 {
		return nil, fmt.Errorf("a network holds 1 to 200 hosts, not %d", n)
	}
	id := randHex(2)
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	nt := &Net{id: id, bridge: "slcb" + id, subnet: fmt.Sprintf("10.232.%d", b[0])}
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
	// policy to DROP), bridged packets pass the FORWARD chain.
	if _, err := exec.LookPath("iptables"); err == nil {
		if exec.Command("iptables", "-I", "FORWARD", "1", "-i", nt.bridge, "-o", nt.bridge, "-j", "ACCEPT").Run() == nil {
			nt.forwardRule = true
		}
	}
	for i := range n {
		h := NetHost{NS: fmt.Sprintf("slc%s-%d", nt.id, i), IP: fmt.Sprintf("%s.%d", nt.subnet, 10+i), veth: fmt.Sprintf("slc%sv%d", nt.id, i)}
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
	script := fmt.Sprintf(`table inet sluicechaos {
  chain in { type filter hook input priority 0; policy accept; ip saddr %s drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr %s drop; }
}`, set, set)
	cmd := exec.Command("ip", "netns", "exec", nt.Hosts[i].NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("isolating host %d: %v: %s", i, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Heal removes host i's partition rules.
func (nt *Net) Heal(i int) error {
	if i < 0 || i >= len(nt.Hosts) {
		return fmt.Errorf("no host %d", i)
	}
	return sh("ip", "netns", "exec", nt.Hosts[i].NS, "nft", "delete", "table", "inet", "sluicechaos")
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
