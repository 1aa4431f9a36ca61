package coordinator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/errs"
)

func TestSessionError(t *testing.T) {
	session := func(epoch int64, live bool) Session { return func() (int64, bool) { return epoch, live } }
	require.Nil(t, SessionError(nil, "__consumer_offsets", 3, true, 0, `group "g"`), "no membership: nothing to check")
	require.Nil(t, SessionError(session(8, true), "__consumer_offsets", 3, true, 8, `group "g"`))

	e := SessionError(session(8, false), "__consumer_offsets", 3, true, 8, `group "g"`)
	require.NotNil(t, e)
	require.Equal(t, errs.NotCoordinator, e.Code)
	require.Contains(t, e.Message, "__consumer_offsets-3")
	require.Equal(t, errs.NotCoordinator, SessionError(session(8, false), "__consumer_offsets", 3, false, 8, `group "g"`).Code,
		"a shard at the leader stops too: the leader may have moved")

	e = SessionError(session(9, true), "__consumer_offsets", 3, true, 8, `group "g"`)
	require.NotNil(t, e)
	require.Equal(t, errs.NotCoordinator, e.Code)
	require.Contains(t, e.Message, "epoch 9")
	require.Nil(t, SessionError(session(9, true), "__consumer_offsets", 3, false, 0, `group "g"`),
		"a shard at the leader is fenced by its leader epoch, not the broker epoch")
}
