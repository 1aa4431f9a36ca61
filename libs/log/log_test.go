package log_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/log"
)

func TestJSONAttributes(t *testing.T) {
	var buf bytes.Buffer
	l, err := log.New(log.Config{Level: "debug", Format: "json"}, &buf)
	require.NoError(t, err)
	l.Info("partition leader elected", log.TopicPartition("orders", 3), log.Epoch(7), log.Err(errors.New("x")))
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, "partition leader elected", line["msg"])
	require.Equal(t, map[string]any{"topic": "orders", "partition": float64(3)}, line["tp"])
	require.Equal(t, float64(7), line["epoch"])
}

func TestLevelFilters(t *testing.T) {
	var buf bytes.Buffer
	l, err := log.New(log.Config{Level: "warn", Format: "text"}, &buf)
	require.NoError(t, err)
	l.Info("hidden")
	l.Warn("shown")
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), "shown")
}

func TestValidate(t *testing.T) {
	require.ErrorContains(t, (&log.Config{Level: "loud", Format: "text"}).Validate(), `log.level: "loud"`)
	require.ErrorContains(t, (&log.Config{Level: "info", Format: "xml"}).Validate(), `log.format: "xml"`)
}

// topKeys returns the keys of one JSON object in order, duplicates
// included (json.Unmarshal into a map would hide them).
func topKeys(t *testing.T, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, k.(string))
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v))
	}
	return keys
}

// A process logger carries its own node id; a line about another node must
// not add a second "node" key.
func TestOneNodeKeyPerLine(t *testing.T) {
	var buf bytes.Buffer
	l, err := log.New(log.Config{Level: "info", Format: "json"}, &buf)
	require.NoError(t, err)
	l = l.With(log.Node(1))
	l.Info("node registered", log.NodeID(4), log.BrokerEpoch(9))
	keys := topKeys(t, buf.Bytes())
	n := 0
	for _, k := range keys {
		if k == "node" {
			n++
		}
	}
	require.Equal(t, 1, n, "keys %v", keys)
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, float64(1), line["node"], "node is the process's own id")
	require.Equal(t, float64(4), line["peer"])
}
