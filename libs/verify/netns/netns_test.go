package netns

import (
	"strings"
	"testing"
)

var testNames = Names{Bridge: "sltb", Host: "slt", Subnet: "10.233", Table: "sluicetest"}

func TestNamesValidate(t *testing.T) {
	if err := testNames.validate(); err != nil {
		t.Fatalf("valid names refused: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Names)
		wants string
	}{
		{"no bridge", func(n *Names) { n.Bridge = "" }, "need a bridge"},
		{"no table", func(n *Names) { n.Table = "" }, "need a bridge"},
		{"long bridge", func(n *Names) { n.Bridge = "bridgebridge" }, "bridge prefix"},
		{"long host", func(n *Names) { n.Host = "hosthost" }, "host prefix"},
		{"table with brace", func(n *Names) { n.Table = "t{" }, "hold a space"},
		{"three octets", func(n *Names) { n.Subnet = "10.1.2" }, "two octets"},
		{"octet too big", func(n *Names) { n.Subnet = "10.256" }, "two octets"},
		{"not a number", func(n *Names) { n.Subnet = "10.x" }, "two octets"},
	} {
		n := testNames
		tc.edit(&n)
		err := n.validate()
		if err == nil || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.wants)
		}
	}
}

// New refuses bad input before it runs any command.
func TestNewRefusesBadInput(t *testing.T) {
	for _, n := range []int{0, -1, maxHosts + 1} {
		if _, err := New(n, testNames); err == nil || !strings.Contains(err.Error(), "hosts") {
			t.Errorf("New(%d): got %v, want a host count error", n, err)
		}
	}
	if _, err := New(3, Names{}); err == nil {
		t.Error("New with no names: got no error")
	}
}

// Isolate, Disconnect and Heal refuse hosts that are not in the network.
func TestIsolateRefusesBadHosts(t *testing.T) {
	nt := &Net{names: testNames, Hosts: []Host{{NS: "a", IP: "10.233.1.10"}, {NS: "b", IP: "10.233.1.11"}}}
	for _, tc := range []struct {
		i    int
		from []int
	}{{-1, []int{1}}, {2, []int{0}}, {0, nil}, {0, []int{0}}, {0, []int{2}}} {
		if err := nt.Isolate(tc.i, tc.from); err == nil {
			t.Errorf("Isolate(%d, %v): got no error", tc.i, tc.from)
		}
	}
	for _, i := range []int{-1, 2} {
		if err := nt.Disconnect(i); err == nil {
			t.Errorf("Disconnect(%d): got no error", i)
		}
	}
	if err := nt.Heal(5); err == nil {
		t.Error("Heal(5): got no error")
	}
}
