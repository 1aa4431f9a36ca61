package config

import (
	"errors"
	"flag"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNodeIDFlag(t *testing.T) {
	parse := func(args ...string) (Node, error) {
		var n Node
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(new(discard))
		n.RegisterFlags(fs)
		return n, fs.Parse(args)
	}
	n, err := parse()
	require.NoError(t, err)
	require.Equal(t, 1, n.ID, "default")
	require.False(t, n.IDAuto)
	n, err = parse("--node-id=7")
	require.NoError(t, err)
	require.Equal(t, 7, n.ID)
	n, err = parse("--node-id=auto")
	require.NoError(t, err)
	require.True(t, n.IDAuto)
	n, err = parse("--node-id=ordinal+100")
	require.NoError(t, err)
	require.True(t, n.IDOrdinal)
	require.Equal(t, 100, n.ID, "the base until Resolve adds the ordinal")
	_, err = parse("--node-id=seven")
	require.ErrorContains(t, err, "neither a number, auto nor ordinal+N")
	_, err = parse("--node-id=ordinal+x")
	require.ErrorContains(t, err, "ordinal+N needs a number")
}

func TestHostOrdinal(t *testing.T) {
	for host, want := range map[string]int{"sluice-storage-0": 0, "sluice-storage-12": 12, "a-7": 7} {
		got, err := HostOrdinal(host)
		require.NoError(t, err, host)
		require.Equal(t, want, got, host)
	}
	for _, host := range []string{"c0ffee", "sluice-storage-", "sluice-storage-+1", "storage-1a"} {
		_, err := HostOrdinal(host)
		require.ErrorContains(t, err, "does not end in -<number>", host)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestAutoID(t *testing.T) {
	a, b := AutoID("3f2a9c1b7d4e"), AutoID("8e1d0c2b3a4f")
	require.NotEqual(t, a, b)
	require.Equal(t, a, AutoID("3f2a9c1b7d4e"), "the same host name keeps its id across restarts")
	for _, id := range []int{a, b} {
		require.GreaterOrEqual(t, id, AutoIDBase)
		require.Less(t, id, 1<<30)
		n := Node{ID: id, DataDir: "d", Listen: "127.0.0.1:1"}
		require.NoError(t, n.Validate(), "an automatic id is a valid id")
	}
}

// A container listens on the wildcard address; what it registers must be
// the address others dial: the one its host name resolves to.
func TestResolve(t *testing.T) {
	hostname := func() (string, error) { return "c0ffee", nil }
	lookup := func(h string) ([]net.IP, error) {
		if h != "c0ffee" {
			return nil, errors.New("unknown host")
		}
		return []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("172.20.0.5")}, nil
	}
	ifaces := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("10.1.2.3"), Mask: net.CIDRMask(8, 32)}}, nil
	}
	for _, tc := range []struct {
		name                string
		n                   Node
		advertise, kafkaAdv string
		id                  int
	}{
		{name: "explicit hosts stay", n: Node{ID: 4, Listen: "127.0.0.1:9090", KafkaListen: "127.0.0.1:9092"},
			advertise: "127.0.0.1:9090", kafkaAdv: "127.0.0.1:9092", id: 4},
		{name: "wildcard listen", n: Node{ID: 4, Listen: "0.0.0.0:9090", KafkaListen: "[::]:9092"},
			advertise: "172.20.0.5:9090", kafkaAdv: "172.20.0.5:9092", id: 4},
		{name: "empty advertised host", n: Node{ID: 4, Listen: "0.0.0.0:9090", Advertise: ":19090", KafkaListen: "0.0.0.0:9092", KafkaAdvertise: "kafka.example:9092"},
			advertise: "172.20.0.5:19090", kafkaAdv: "kafka.example:9092", id: 4},
		{name: "kafka port picked at bind", n: Node{ID: 4, Listen: "0.0.0.0:9090", KafkaListen: "0.0.0.0:0"},
			advertise: "172.20.0.5:9090", id: 4},
		{name: "auto id", n: Node{IDAuto: true, Listen: "10.9.9.9:9090"},
			advertise: "10.9.9.9:9090", id: AutoID("c0ffee")},
	} {
		n := tc.n
		require.NoError(t, n.resolve(hostname, lookup, ifaces), tc.name)
		require.Equal(t, tc.advertise, n.Advertise, tc.name)
		require.Equal(t, tc.kafkaAdv, n.KafkaAdvertise, tc.name)
		require.Equal(t, tc.id, n.ID, tc.name)
		require.False(t, n.IDAuto, tc.name)
	}

	// A StatefulSet pod: its base plus the ordinal ending its name.
	pod := func() (string, error) { return "sluice-storage-2", nil }
	n := Node{IDOrdinal: true, ID: 100, Listen: "10.9.9.9:9090"}
	require.NoError(t, n.resolve(pod, lookup, ifaces))
	require.Equal(t, 102, n.ID)
	require.False(t, n.IDOrdinal)
	n = Node{IDOrdinal: true, ID: 100, Listen: "10.9.9.9:9090"}
	require.ErrorContains(t, n.resolve(hostname, lookup, ifaces), "does not end in -<number>")

	// A host name that resolves to nothing routable: the interfaces.
	n = Node{Listen: "0.0.0.0:9090"}
	require.NoError(t, n.resolve(func() (string, error) { return "other", nil }, lookup, ifaces))
	require.Equal(t, "10.1.2.3:9090", n.Advertise)

	// Nothing at all: an error that says what to set.
	n = Node{Listen: "0.0.0.0:9090"}
	err := n.resolve(hostname, func(string) ([]net.IP, error) { return nil, errors.New("no") },
		func() ([]net.Addr, error) { return nil, nil })
	require.ErrorContains(t, err, "set a host others can dial")
}
