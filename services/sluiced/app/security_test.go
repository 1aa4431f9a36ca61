package app

import (
	"context"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func parseFlags(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.NoError(t, fs.Parse(append([]string{"--data-dir", t.TempDir()}, args...)))
	return cfg
}

// SASL/PLAIN on a Kafka listener without TLS would take passwords in clear
// text: sluiced refuses to start unless the operator opts in.
func TestPlainSASLWithoutTLSRefusedAtStart(t *testing.T) {
	cfg := parseFlags(t, "--kafka.sasl.mechanisms=SCRAM-SHA-256,plain")
	err := Run(context.Background(), cfg, io.Discard)
	require.Error(t, err)
	require.Contains(t, err.Error(), "PLAIN on a Kafka listener without TLS would send passwords in clear text")
	require.Contains(t, err.Error(), "--kafka.sasl.allow-plain-without-tls")

	for _, args := range [][]string{
		{"--kafka.sasl.mechanisms=PLAIN", "--kafka.sasl.allow-plain-without-tls"},
		{"--kafka.sasl.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512"}, // SCRAM never sends the password
		{},
	} {
		cfg := parseFlags(t, args...)
		require.NoError(t, cfg.Validate(), "%v", args)
	}
}
