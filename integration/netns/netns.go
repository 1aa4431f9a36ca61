// Package netns builds test networks out of Linux network namespaces: one
// namespace per host, joined by veth pairs to a bridge in the test's own
// namespace, so a test can run each process on its own IP address and cut
// any host off from any others with nftables rules, while the test itself
// (on the bridge) still reaches every host. It needs root (CAP_NET_ADMIN),
// iproute2 and nftables; traffic never leaves the machine.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Net is a bridge with hosts.
type Net struct {
	t      testing.TB
	id     string
	bridge string
	subnet string // first three octets, such as "10.231.17"
	Hosts  []*Host
	// forwardRule is set when an iptables FORWARD rule was added for the
	// bridge.
	forwardRule bool
}

// Host is one network namespace with one address.
type Host struct {
	Name string
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
	name := "slprobe" + randHex(3)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("cannot create a network namespace (needs root / CAP_NET_ADMIN): %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", name).Run() // probe only
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// New makes a bridge and n hosts named host-0..host-n-1, removed when the
// test ends.
func New(t testing.TB, n int) *Net {
	t.Helper()
	id := randHex(2)
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	nt := &Net{t: t, id: id, bridge: "slbr" + id, subnet: fmt.Sprintf("10.231.%d", b[0])}
	t.Cleanup(nt.destroy)
	run(t, "ip", "link", "add", nt.bridge, "type", "bridge")
	run(t, "ip", "addr", "add", nt.subnet+".1/24", "dev", nt.bridge)
	run(t, "ip", "link", "set", nt.bridge, "up")
	// With br_netfilter loaded (Docker loads it, and sets the FORWARD
	// policy to DROP), bridged packets pass the FORWARD chain: let this
	// bridge's through.
	if _, err := exec.LookPath("iptables"); err == nil {
		if exec.Command("iptables", "-I", "FORWARD", "1", "-i", nt.bridge, "-o", nt.bridge, "-j", "ACCEPT").Run() == nil {
			nt.forwardRule = true
		}
	}
	for i := range n {
		h := &Host{Name: fmt.Sprintf("host-%d", i), NS: fmt.Sprintf("sl%s-%d", id, i), IP: fmt.Sprintf("%s.%d", nt.subnet, 10+i)}
		h.veth = fmt.Sprintf("sl%sv%d", id, i)
		peer := h.veth + "p"
		run(t, "ip", "netns", "add", h.NS)
		run(t, "ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer)
		run(t, "ip", "link", "set", h.veth, "master", nt.bridge)
		run(t, "ip", "link", "set", h.veth, "up")
		run(t, "ip", "link", "set", peer, "netns", h.NS)
		run(t, "ip", "netns", "exec", h.NS, "ip", "link", "set", "lo", "up")
		run(t, "ip", "netns", "exec", h.NS, "ip", "link", "set", peer, "name", "eth0")
		run(t, "ip", "netns", "exec", h.NS, "ip", "addr", "add", h.IP+"/24", "dev", "eth0")
		run(t, "ip", "netns", "exec", h.NS, "ip", "link", "set", "eth0", "up")
		nt.Hosts = append(nt.Hosts, h)
	}
	return nt
}

// Exec returns the command prefix that runs a program inside host i.
func (nt *Net) Exec(i int) []string { return []string{"ip", "netns", "exec", nt.Hosts[i].NS} }

// Isolate drops every packet between host i and the given hosts, in both
// directions (a silent partition: connections hang, they are not refused).
// The bridge address (the test itself) stays reachable.
func (nt *Net) Isolate(i int, from ...int) {
	nt.t.Helper()
	var ips []string
	for _, j := range from {
		ips = append(ips, nt.Hosts[j].IP)
	}
	set := "{ " + strings.Join(ips, ", ") + " }"
	ns := nt.Hosts[i].NS
	script := fmt.Sprintf(`table inet sluicecut {
  chain in { type filter hook input priority 0; policy accept; ip saddr %s drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr %s drop; }
}`, set, set)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		nt.t.Fatalf("isolating %s: %v: %s", nt.Hosts[i].Name, err, out)
	}
}

// Heal removes host i's partition rules.
func (nt *Net) Heal(i int) {
	nt.t.Helper()
	run(nt.t, "ip", "netns", "exec", nt.Hosts[i].NS, "nft", "delete", "table", "inet", "sluicecut")
}

func (nt *Net) destroy() {
	for _, h := range nt.Hosts {
		_ = exec.Command("ip", "netns", "del", h.NS).Run() // takes its veth end along
		_ = exec.Command("ip", "link", "del", h.veth).Run()
	}
	if nt.forwardRule {
		_ = exec.Command("iptables", "-D", "FORWARD", "-i", nt.bridge, "-o", nt.bridge, "-j", "ACCEPT").Run()
	}
	_ = exec.Command("ip", "link", "del", nt.bridge).Run()
}
