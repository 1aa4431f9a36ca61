package kafka

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestErrorCode(t *testing.T) {
	require.Equal(t, int16(0), ErrorCode(nil))
	require.Equal(t, int16(6), ErrorCode(errs.New(errs.NotLeaderOrFollower, "moved")))
	require.Equal(t, int16(100), ErrorCode(errs.New(errs.UnknownTopicID, "no such id")))
	// Sluice-only errors: retriable ones become REQUEST_TIMED_OUT, which
	// Kafka clients retry; the others UNKNOWN_SERVER_ERROR.
	require.Equal(t, int16(7), ErrorCode(errs.New(errs.NodeNotReady, "starting")))
	require.Equal(t, int16(-1), ErrorCode(errs.New(errs.Unimplemented, "no")))
	require.Equal(t, int16(-1), ErrorCode(errors.New("plain")))
	require.Nil(t, ErrorMessage(nil))
	require.Equal(t, "x", *ErrorMessage(errors.New("x")))
}
