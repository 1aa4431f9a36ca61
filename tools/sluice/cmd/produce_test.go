package cmd

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// --idempotence against --acks, as Kafka's producer resolves
// enable.idempotence against acks.
func TestDisableIdempotence(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		disable bool
		note    string
		err     string
	}{
		{args: nil},
		{args: []string{"--acks", "all"}},
		{args: []string{"--idempotence"}},
		{args: []string{"--idempotence=false"}, disable: true},
		{args: []string{"--acks", "1"}, disable: true, note: "note: --acks 1 turns idempotence off (it needs --acks all)\n"},
		{args: []string{"--acks", "0", "--idempotence=false"}, disable: true},
		{args: []string{"--acks", "1", "--idempotence"}, err: "--idempotence needs --acks all; pass --idempotence=false to produce with --acks 1"},
		{args: []string{"--acks", "0", "--idempotence=true"}, err: "--idempotence needs --acks all"},
	} {
		var acks string
		var idem bool
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		cmd.Flags().StringVar(&acks, "acks", "all", "")
		cmd.Flags().BoolVar(&idem, "idempotence", true, "")
		var stderr bytes.Buffer
		cmd.SetErr(&stderr)
		require.NoError(t, cmd.ParseFlags(tc.args))
		a, err := parseAcks(acks)
		require.NoError(t, err)
		disable, err := disableIdempotence(cmd, a, idem)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%v", tc.args)
			continue
		}
		require.NoError(t, err, "%v", tc.args)
		require.Equal(t, tc.disable, disable, "%v", tc.args)
		require.Equal(t, tc.note, stderr.String(), "%v", tc.args)
	}
}
