package cmd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/verify"
)

func TestParseVerifyMixes(t *testing.T) {
	p, err := parseProducers("plain=0, idempotent=3,transactional=1")
	require.NoError(t, err)
	require.Equal(t, verify.Producers{Idempotent: 3, Transactional: 1}, p)
	c, err := parseConsumers("classic=2,consumer=1")
	require.NoError(t, err)
	require.Equal(t, verify.Consumers{ClassicGroup: 2, ConsumerGroup: 1}, c)

	for _, bad := range []string{"plain", "plain=x", "plain=-1", "plain=65", "typo=1", "plain=0", ""} {
		_, err := parseProducers(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "--producers", bad)
	}
}

// Usage problems end `sluice verify` with status 2, through exitError.
func TestVerifyUsageExitStatus(t *testing.T) {
	run := func(args ...string) error {
		root, _ := newRoot()
		root.SetArgs(append([]string{"verify"}, args...))
		root.SetOut(new(nopWriter))
		root.SetErr(new(nopWriter))
		return root.Execute()
	}
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"--producers", "plain=x"},
		{"--consumers", "classic=1,bogus=2"},
		{"--check-only", filepath.Join(t.TempDir(), "missing.json")},
		{"--duration", "-1s", "--against", "127.0.0.1:1"},
	} {
		err := run(args...)
		var exit *exitError
		require.True(t, errors.As(err, &exit), "%v: %v", args, err)
		require.Equal(t, verifyUsage, exit.code, "%v", args)
	}
	bad := filepath.Join(t.TempDir(), "history.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"not_a_history": 1}`), 0o644))
	var exit *exitError
	require.True(t, errors.As(run("--check-only", bad), &exit))
	require.Equal(t, verifyUsage, exit.code)
}

type nopWriter struct{}

func (*nopWriter) Write(b []byte) (int, error) { return len(b), nil }
