package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/testutil"
)

// startActiveController starts a one-member controller on an embedded etcd
// in dir and waits until it is active.
func startActiveController(t *testing.T, etcd metastore.Config, dir string) *Controller {
	t.Helper()
	cfg := Config{
		Etcd: etcd, ElectionTTL: time.Second, SessionTimeout: time.Minute, HeartbeatInterval: time.Second,
		DefaultPartitions: 1, DefaultReplicationFactor: 1,
	}
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 1 << 20}, grpcx.ServerOptions{Logger: log.Discard()})
	c := New(cfg, service.Deps{Logger: log.Discard(), Server: srv, Node: config.Node{ID: 1, DataDir: dir}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.Start(ctx))
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if !c.IsActive() {
			return errors.New("the controller is not active yet")
		}
		return nil
	})
	return c
}

func stopController(t *testing.T, c *Controller) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

// Producer ids come in disjoint blocks, also across a controller restart,
// and a counter that is unreadable, negative, deleted or near overflow stops
// allocation with an error instead of starting over at 0 (which would hand
// out ids still in use).
func TestAllocateProducerIDs(t *testing.T) {
	etcd, dir := metastoretest.Config(t), t.TempDir()
	c := startActiveController(t, etcd, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg, err := c.RegisterBroker(ctx, &controllerv1.RegisterBrokerRequest{BrokerId: 7, IncarnationId: "a", Roles: []string{"transaction-coordinator"}})
	require.NoError(t, err)
	alloc := func() (*controllerv1.AllocateProducerIdsResponse, error) {
		return c.AllocateProducerIds(ctx, &controllerv1.AllocateProducerIdsRequest{BrokerId: 7, BrokerEpoch: reg.GetBrokerEpoch()})
	}

	first, err := alloc()
	require.NoError(t, err)
	require.Equal(t, int64(0), first.GetProducerIdStart(), "a new cluster starts at 0")
	require.Equal(t, int32(producerIDBlock), first.GetProducerIdLen())
	second, err := alloc()
	require.NoError(t, err)
	require.Equal(t, int64(producerIDBlock), second.GetProducerIdStart())

	_, err = c.AllocateProducerIds(ctx, &controllerv1.AllocateProducerIdsRequest{BrokerId: 7, BrokerEpoch: reg.GetBrokerEpoch() + 1})
	require.Equal(t, errs.StaleBrokerEpoch, errs.CodeOf(err))

	// A restarted controller goes on from the stored counter.
	stopController(t, c)
	c = startActiveController(t, etcd, dir)
	third, err := alloc()
	require.NoError(t, err)
	require.Equal(t, int64(2*producerIDBlock), third.GetProducerIdStart())

	key := c.store.Key(metastore.KeyProducerIDNext)
	for _, bad := range []string{"", "x12", "-5", "9223372036854775000"} {
		_, err := c.store.Client.Put(ctx, key, bad)
		require.NoError(t, err)
		_, err = alloc()
		require.Equal(t, errs.UnknownServerError, errs.CodeOf(err), "counter %q: %v", bad, err)
		resp, err := c.store.Client.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, bad, string(resp.Kvs[0].Value), "a failed allocation leaves the counter alone")
	}
	_, err = c.store.Client.Delete(ctx, key)
	require.NoError(t, err)
	_, err = alloc()
	require.Equal(t, errs.UnknownServerError, errs.CodeOf(err), "a deleted counter is not a new cluster: %v", err)

	// An operator restores the counter; allocation resumes from it.
	_, err = c.store.Client.Put(ctx, key, "5000")
	require.NoError(t, err)
	fourth, err := alloc()
	require.NoError(t, err)
	require.Equal(t, int64(5000), fourth.GetProducerIdStart())
	stopController(t, c)
}
