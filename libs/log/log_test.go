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
