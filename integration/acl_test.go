package integration

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// A cluster with --authz.enabled (mutual TLS; User:admin is the super
// user, the processes pass by their role certificates): ACLs made with the
// CLI and with Kafka's CreateAcls are listed and deleted by both, and an
// ACL created on the controller takes effect on another process's Kafka
// listener, on a connection opened before it, within a bound the test
// measures.
func TestACLs(t *testing.T) {
	c := startAuthzCluster(t)
	files, storage, sdk := c.files, c.storage, c.admin
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cli := func(args ...string) (string, error) {
		full := append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","), "--request-timeout", "20s",
			"--tls-ca", files.CA, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey}, args...)
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, cluster.CLI(t), full...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return out.String(), &cliError{err: err, stderr: errOut.String()}
		}
		return out.String(), nil
	}
	_, err := cli("topic", "create", "orders", "--partitions", "1", "--replication-factor", "1")
	require.NoError(t, err)

	// The CLI: create, list, refuse a bad operation, delete.
	out, err := cli("acl", "create", "--allow-principal", "User:etl", "--operation", "Read,Describe",
		"--topic", "logs-", "--resource-pattern-type", "prefixed", "--group", "etl")
	require.NoError(t, err)
	require.Contains(t, out, "Created 4 ACL(s)")
	out, err = cli("acl", "list", "--principal", "User:etl")
	require.NoError(t, err)
	require.Equal(t, 5, strings.Count(out, "\n"), out) // header and four ACLs
	require.Contains(t, out, "User:etl   *     Allow       Read       Topic     logs-")
	_, err = cli("acl", "create", "--allow-principal", "User:etl", "--operation", "ClusterAction", "--topic", "x")
	require.ErrorContains(t, err, "ClusterAction does not apply to a Topic")
	_, err = cli("acl", "delete")
	require.ErrorContains(t, err, "--all")

	// Kafka's ACL APIs, as the admin, on the storage node's listener.
	adminTLS, err := files.ClientTLS()
	require.NoError(t, err)
	adminTLS.ServerName = "127.0.0.1"
	kcl, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(adminTLS))
	require.NoError(t, err)
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	b := kadm.NewACLs().Allow("User:bi").AllowHosts("*").Topics("reports").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral)
	created, err := adm.CreateACLs(ctx, b)
	require.NoError(t, err)
	require.Len(t, created, 1)
	require.NoError(t, created[0].Err)
	bad, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:bi").AllowHosts("db.example.com").Topics("reports").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	require.NoError(t, err)
	require.ErrorIs(t, bad[0].Err, kerr.InvalidRequest)
	require.Contains(t, bad[0].ErrMessage, "neither")
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics("logs-eu").ResourcePatternType(kadm.ACLPatternMatch).Operations(kadm.OpAny).Allow().AllowHosts())
	require.NoError(t, err)
	require.Len(t, described, 1)
	require.NoError(t, described[0].Err)
	require.Len(t, described[0].Described, 2, "MATCH finds the prefixed logs- ACLs")
	deleted, err := adm.DeleteACLs(ctx, kadm.NewACLs().Allow("User:etl").AllowHosts().Groups("etl").Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	require.NoError(t, err)
	require.Len(t, deleted, 1)
	require.NoError(t, deleted[0].Err)
	require.Len(t, deleted[0].Deleted, 2)
	out, err = cli("acl", "list")
	require.NoError(t, err)
	require.Contains(t, out, "User:bi")
	require.NotContains(t, out, "Group")

	// alice, authenticated by a certificate of the cluster's CA, keeps one
	// Kafka connection open to the storage node while the controller's ACLs
	// change.
	aliceTLS := c.userTLS(t, "alice")
	aliceTLS.ServerName = "127.0.0.1"
	alice, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(aliceTLS))
	require.NoError(t, err)
	defer alice.Close()
	broker := alice.Broker(int(storage.NodeID))
	topicErr := func() int16 {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("orders")
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, broker)
		require.NoError(t, err)
		return resp.Topics[0].ErrorCode
	}
	require.Equal(t, kerr.TopicAuthorizationFailed.Code, topicErr(), "no ACL: alice may not describe orders")
	// alice may not grant herself anything (Alter on the cluster), nor
	// list ACLs (Describe on the cluster).
	refused, err := kadm.NewClient(alice).CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts("*").Topics("orders").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral))
	require.NoError(t, err)
	require.Len(t, refused, 1)
	require.ErrorIs(t, refused[0].Err, kerr.ClusterAuthorizationFailed)
	listed, err := kadm.NewClient(alice).DescribeACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.ErrorIs(t, listed[0].Err, kerr.ClusterAuthorizationFailed)

	waitFor := func(want int16) time.Duration {
		start := time.Now()
		for topicErr() != want {
			require.Less(t, time.Since(start), 10*time.Second, "ACL change not in effect on the storage node after 10 s")
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	writeACL := topicACL("User:alice", "orders", controllerv1.AclOperation_ACL_OPERATION_WRITE)
	const rounds = 10
	var grant, revoke []time.Duration
	for i := 0; i < rounds; i++ {
		r, err := sdk.CreateAcls(ctx, writeACL)
		require.NoError(t, err)
		require.Nil(t, errs.FromProto(r.GetErrors()[0]))
		grant = append(grant, waitFor(0)) // Write implies Describe
		d, err := sdk.DeleteAcls(ctx, writeACL)
		require.NoError(t, err)
		require.Len(t, d.GetDeleted(), 1)
		revoke = append(revoke, waitFor(kerr.TopicAuthorizationFailed.Code))
	}
	slices.Sort(grant)
	slices.Sort(revoke)
	t.Logf("ACL change on the controller to effect on the storage node's open Kafka connection (%d rounds, 1 ms polling, one Metadata round trip): grant p50 %v max %v; revoke p50 %v max %v",
		rounds, grant[rounds/2], grant[rounds-1], revoke[rounds/2], revoke[rounds-1])

	// With the ACL, alice produces on the same connection; a Deny wins.
	_, err = sdk.CreateAcls(ctx, writeACL)
	require.NoError(t, err)
	waitFor(0)
	require.NoError(t, alice.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr())
	deny := proto.Clone(writeACL).(*controllerv1.AclBinding)
	deny.Permission = controllerv1.AclPermission_ACL_PERMISSION_DENY
	deny.Operation = controllerv1.AclOperation_ACL_OPERATION_ALL
	_, err = sdk.CreateAcls(ctx, deny)
	require.NoError(t, err)
	waitFor(kerr.TopicAuthorizationFailed.Code)
}
