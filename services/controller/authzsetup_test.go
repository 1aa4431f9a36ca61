package controller

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/config"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
	"github.com/sluice-io/sluice/libs/service"
	"github.com/sluice-io/sluice/libs/testutil"
)

// startAuthzController starts an active controller on a real etcd and a
// loopback gRPC server, with an authorizer (super user User:admin) that
// follows the controller's own metadata. It returns the controller, its
// authorizer and the server's address; everything stops with the test.
func startAuthzController(t *testing.T, ctx context.Context, logger *slog.Logger) (*Controller, *authz.ACLAuthorizer, string) {
	t.Helper()
	cfg := Config{
		Etcd: metastoretest.Config(t), ElectionTTL: time.Second, SessionTimeout: time.Minute, HeartbeatInterval: time.Second,
		DefaultPartitions: 1, DefaultReplicationFactor: 1,
	}
	srv := grpcx.NewServer(grpcx.ServerConfig{MaxRecvMsgBytes: 1 << 20}, grpcx.ServerOptions{Logger: log.Discard()})
	own := authz.New(authz.Config{SuperUsers: []string{"User:admin"}})
	deps := service.Deps{Logger: logger, Server: srv, Node: config.Node{ID: 1, DataDir: t.TempDir()}, Metadata: metadata.NewCache(), Authz: own}
	c := New(cfg, deps)
	require.NoError(t, c.Start(ctx))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv.SetServing(true, c.HealthServices()...)
	go func() { _ = srv.Serve(lis) }() // ends when the listener closes
	t.Cleanup(srv.GRPC.Stop)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if !c.IsActive() {
			return errors.New("the controller is not active yet")
		}
		return nil
	})
	authz.Follow(ctx, own, deps.Metadata)
	return c, own, lis.Addr().String()
}

// remoteMetadata is another process's metadata: its own cache filled by a
// watch stream from the controller at addr. Watching metadata takes
// ClusterAction on the cluster; the controller authenticates nobody, so
// the watcher is User:ANONYMOUS and is given that ACL first.
func remoteMetadata(t *testing.T, ctx context.Context, c *Controller, own *authz.ACLAuthorizer, addr string) *metadata.Cache {
	t.Helper()
	admin := auth.NewContext(ctx, auth.Identity{Principal: auth.User("admin"), Host: "127.0.0.1"})
	_, err := c.CreateAcls(admin, &controllerv1.CreateAclsRequest{Bindings: []*controllerv1.AclBinding{{
		ResourceType: controllerv1.ResourceType_RESOURCE_TYPE_CLUSTER, ResourceName: authz.ClusterName,
		Principal: "User:ANONYMOUS", Operation: controllerv1.AclOperation_ACL_OPERATION_CLUSTER_ACTION,
		Permission: controllerv1.AclPermission_ACL_PERMISSION_ALLOW,
	}}})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if !own.Authorize(ctx, auth.Identity{Principal: auth.Anonymous}, authz.ClusterAction, authz.Cluster, authz.ClusterName) {
			return errors.New("the controller's authorizer does not see the ACL yet")
		}
		return nil
	})
	cache := metadata.NewCache()
	w := metadata.NewWatcher(cache, []string{addr}, func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}, 2, log.Discard())
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	return cache
}
