// Package netns builds test networks out of Linux network namespaces (see
// libs/verify/netns): one namespace per host, joined by veth pairs to a
// bridge in the test's own namespace, so a test can run each process on its
// own IP address and cut any host off from any others with nftables rules,
// while the test itself (on the bridge) still reaches every host. Every
// failure fails the test. It needs root (CAP_NET_ADMIN), iproute2 and
// nftables; traffic never leaves the machine.
package netns

import (
	"fmt"
	"testing"

	vnetns "github.com/sluice-io/sluice/libs/verify/netns"
)

// names keep test networks apart from those of a chaos run (tools/chaos)
// on the same machine.
var names = vnetns.Names{Bridge: "slbr", Host: "sl", Subnet: "10.231", Table: "sluicecut"}

// Net is a bridge with hosts.
type Net struct {
	t     testing.TB
	net   *vnetns.Net
	Hosts []*Host
}

// Host is one network namespace with one address.
type Host struct {
	Name string
	NS   string
	IP   string
}

// Available reports whether network namespaces can be made here, and if
// not, why.
func Available() error { return vnetns.Available() }

// New makes a bridge and n hosts named host-0..host-n-1, removed when the
// test ends.
func New(t testing.TB, n int) *Net {
	t.Helper()
	net, err := vnetns.New(n, names)
	if err != nil {
		t.Fatalf("making a network of %d hosts: %v", n, err)
	}
	t.Cleanup(net.Close)
	nt := &Net{t: t, net: net}
	for i, h := range net.Hosts {
		nt.Hosts = append(nt.Hosts, &Host{Name: fmt.Sprintf("host-%d", i), NS: h.NS, IP: h.IP})
	}
	return nt
}

// Exec returns the command prefix that runs a program inside host i.
func (nt *Net) Exec(i int) []string { return nt.net.Exec(i) }

// Isolate drops every packet between host i and the given hosts, in both
// directions (a silent partition: connections hang, they are not refused).
// The bridge address (the test itself) stays reachable.
func (nt *Net) Isolate(i int, from ...int) {
	nt.t.Helper()
	if err := nt.net.Isolate(i, from); err != nil {
		nt.t.Fatal(err)
	}
}

// Disconnect drops every packet between host i and anything else, the
// bridge (the test) included, as docker network disconnect does; Heal
// ends it.
func (nt *Net) Disconnect(i int) {
	nt.t.Helper()
	if err := nt.net.Disconnect(i); err != nil {
		nt.t.Fatal(err)
	}
}

// Heal removes host i's partition rules.
func (nt *Net) Heal(i int) {
	nt.t.Helper()
	if err := nt.net.Heal(i); err != nil {
		nt.t.Fatal(err)
	}
}
