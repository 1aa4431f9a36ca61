package membership

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	"github.com/sluice-io/sluice/libs/log"
)

// The session lease runs from the send time of the last answered heartbeat
// of the current epoch for the session timeout less a tenth; a stale epoch
// or a new registration ends it.
func TestSessionLease(t *testing.T) {
	m := New(Config{NodeID: 1}, nil, nil, log.Discard())
	m.sessionTimeout = 3 * time.Second
	m.set(8, commonv1.BrokerState_BROKER_STATE_ALIVE)

	epoch, live := m.Session()
	require.Equal(t, int64(8), epoch)
	require.False(t, live, "no heartbeat answered yet")

	m.renew(8, time.Now())
	_, live = m.Session()
	require.True(t, live)

	m.endLease()
	_, live = m.Session()
	require.False(t, live, "the controller said the epoch is stale")

	m.renew(8, time.Now().Add(-2800*time.Millisecond))
	_, live = m.Session()
	require.False(t, live, "a heartbeat sent 2.8 s ago keeps a 3 s session only until 2.7 s after it")

	m.renew(7, time.Now())
	_, live = m.Session()
	require.False(t, live, "an answer for an earlier epoch renews nothing")

	m.renew(8, time.Now())
	m.renew(8, time.Now().Add(-time.Second))
	_, live = m.Session()
	require.True(t, live, "an older heartbeat's answer does not shorten the lease")
}
