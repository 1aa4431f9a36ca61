package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/devcluster"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// authzCluster is a cluster of one controller and one storage node with
// --authz.enabled over mutual TLS: the processes pass by their role
// certificates and the harness's client certificate (User:admin) is the
// super user.
type authzCluster struct {
	*devcluster.Cluster
	files   *devcluster.TLSFiles
	storage *devcluster.Process
	// admin is an SDK client of the super user, closed when the test ends.
	admin *client.Client
}

// startAuthzCluster starts an authzCluster; extra are more sluiced flags.
func startAuthzCluster(t *testing.T, extra ...string) *authzCluster {
	t.Helper()
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 1, TLS: true,
		ExtraArgs: append([]string{"--authz.enabled", "--authz.super-users=User:admin"}, extra...)})
	adminTLS, err := c.TLS().ClientTLS()
	require.NoError(t, err)
	admin, err := client.New(client.Config{Bootstrap: c.Bootstrap(), TLS: adminTLS, RequestTimeout: 20 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	return &authzCluster{Cluster: c, files: c.TLS(), storage: c.StorageNodes()[0], admin: admin}
}

// userCertFiles issues a client certificate of the cluster's CA with
// subject CN=name (principal User:name) and returns its file paths.
func (a *authzCluster) userCertFiles(t *testing.T, name string) (cert, key string) {
	t.Helper()
	ca, err := tlsx.LoadCA(a.files.CA, a.files.CAKey)
	require.NoError(t, err)
	pair, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: name}, Validity: time.Hour})
	require.NoError(t, err)
	cert, key, err = pair.WriteFiles(t.TempDir(), name)
	require.NoError(t, err)
	return cert, key
}

// userTLS is the client TLS configuration of a new certificate for
// User:name.
func (a *authzCluster) userTLS(t *testing.T, name string) *tls.Config {
	t.Helper()
	cert, key := a.userCertFiles(t, name)
	cfg, err := wire.ClientTLS(a.files.CA, cert, key)
	require.NoError(t, err)
	return cfg
}

// topicACL is an Allow ACL for principal to perform op on topic (literal,
// every host).
func topicACL(principal, topic string, op controllerv1.AclOperation) *controllerv1.AclBinding {
	return &controllerv1.AclBinding{ResourceType: controllerv1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: topic,
		PatternType: controllerv1.PatternType_PATTERN_TYPE_LITERAL, Principal: principal, Host: "*", Operation: op,
		Permission: controllerv1.AclPermission_ACL_PERMISSION_ALLOW}
}

// createACLs creates bindings as the super user and fails the test on any
// refusal.
func (a *authzCluster) createACLs(ctx context.Context, t *testing.T, bindings ...*controllerv1.AclBinding) {
	t.Helper()
	r, err := a.admin.CreateAcls(ctx, bindings...)
	require.NoError(t, err)
	for i, e := range r.GetErrors() {
		require.Nil(t, errs.FromProto(e), "binding %d", i)
	}
}
