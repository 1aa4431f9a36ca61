package config_test

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/config"
)

func TestNodeDefaultsAreValid(t *testing.T) {
	var n config.Node
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n.RegisterFlags(fs)
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, n.Validate())
	require.Equal(t, "127.0.0.1:9090", n.AdvertiseAddr())
}

func TestNodeValidationNamesTheFlag(t *testing.T) {
	n := config.Node{ID: -1, DataDir: "", Listen: "9090", Controllers: "a:1, b"}
	err := n.Validate()
	require.ErrorContains(t, err, "node-id: -1")
	require.ErrorContains(t, err, "data-dir: must be set")
	require.ErrorContains(t, err, `listen: "9090" is not host:port`)
	require.ErrorContains(t, err, `controllers: "b" is not host:port`)
}

func TestNodeKafkaListener(t *testing.T) {
	n := config.Node{DataDir: "d", Listen: "127.0.0.1:9090", KafkaListen: "127.0.0.1:9092", KafkaAdvertise: "kafka.example:19092"}
	require.NoError(t, n.Validate())
	n.KafkaListen, n.KafkaAdvertise = "9092", "x"
	err := n.Validate()
	require.ErrorContains(t, err, `kafka-listen: "9092" is not host:port`)
	require.ErrorContains(t, err, `kafka-advertise: "x" is not host:port`)
	n.KafkaListen = ""
	require.ErrorContains(t, n.Validate(), "kafka-advertise: set without --kafka-listen")
}
