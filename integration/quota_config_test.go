package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Client quotas on a cluster with --authz.enabled: quotas set with the CLI
// are described through Kafka's DescribeClientQuotas (franz-go kadm), those
// set through Kafka's AlterClientQuotas are listed by the CLI and the SDK,
// both delete, invalid entries are answered with what to fix, and a caller
// without AlterConfigs / DescribeConfigs on the cluster is refused on
// either protocol.
func TestClientQuotaConfig(t *testing.T) {
	c := startAuthzCluster(t)
	files, storage, sdk := c.files, c.storage, c.admin
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cliAs := func(cert, key string, args ...string) (string, error) {
		full := append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","), "--request-timeout", "20s",
			"--tls-ca", files.CA, "--tls-cert", cert, "--tls-key", key}, args...)
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, cluster.CLI(t), full...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return out.String(), &cliError{err: err, stderr: errOut.String()}
		}
		return out.String(), nil
	}
	cli := func(args ...string) (string, error) { return cliAs(files.ClientCert, files.ClientKey, args...) }

	// The CLI sets quotas on a client id, a user with the default client
	// id, and an IP, and refuses what Kafka would refuse.
	out, err := cli("quota", "set", "--client-id", "app1", "producer_byte_rate=1048576")
	require.NoError(t, err)
	require.Contains(t, out, "client-id=app1")
	_, err = cli("quota", "set", "--user", "alice", "--client-id-default", "consumer_byte_rate=2097152", "request_percentage=50")
	require.NoError(t, err)
	_, err = cli("quota", "set", "--ip", "10.0.0.7", "connection_creation_rate=20")
	require.NoError(t, err)
	_, err = cli("quota", "set", "--client-id", "app1", "producer_rate=1")
	require.ErrorContains(t, err, `unknown quota key "producer_rate"`)
	_, err = cli("quota", "set", "--ip", "db.example.com", "connection_creation_rate=1")
	require.ErrorContains(t, err, "not an IP address")
	_, err = cli("quota", "set", "producer_byte_rate=1")
	require.ErrorContains(t, err, "name the entity")
	_, err = cli("quota", "set", "--user", "bob", "--user-default", "producer_byte_rate=1")
	require.ErrorContains(t, err, "not both")
	_, err = cli("quota", "set", "--client-id", "app1", "--validate-only", "producer_byte_rate=5")
	require.NoError(t, err)

	// Kafka, as the admin, on the storage node's listener: the CLI's
	// quotas are there (validate-only changed nothing).
	adminTLS, err := files.ClientTLS()
	require.NoError(t, err)
	adminTLS.ServerName = "127.0.0.1"
	kcl, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(adminTLS))
	require.NoError(t, err)
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	str := func(s string) *string { return &s }
	described, err := adm.DescribeClientQuotas(ctx, false, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		"{client-id=app1}=[producer_byte_rate=1048576.000000]",
		"{ip=10.0.0.7}=[connection_creation_rate=20.000000]",
		"{user=alice, client-id=<default>}=[consumer_byte_rate=2097152.000000 request_percentage=50.000000]",
	}, quotaStrings(described))
	described, err = adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: str("alice")}, {Type: "client-id", MatchType: kadm.QuotasMatchType(1)}})
	require.NoError(t, err)
	require.Len(t, described, 1, "strict user=alice with the default client id")

	// Kafka's AlterClientQuotas: a default user, a changed client id, an
	// invalid entry answered in its slot.
	altered, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "user"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 5242880}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: str("app1")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 3145728}}},
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: str("app2")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: -1}}},
	})
	require.NoError(t, err)
	require.Len(t, altered, 3)
	require.NoError(t, altered[0].Err)
	require.NoError(t, altered[1].Err)
	require.ErrorIs(t, altered[2].Err, kerr.InvalidRequest)
	require.Contains(t, altered[2].ErrMessage, "must be a positive number")
	validated, err := adm.ValidateAlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: str("app3")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}}})
	require.NoError(t, err)
	require.NoError(t, validated[0].Err)

	// The CLI and the SDK list what Kafka set.
	out, err = cli("quota", "list", "--client-id", "app1")
	require.NoError(t, err)
	require.Contains(t, out, "client-id=app1  consumer_byte_rate  3145728")
	require.Contains(t, out, "client-id=app1  producer_byte_rate  1048576")
	out, err = cli("--output", "json", "quota", "list", "--user-default")
	require.NoError(t, err)
	var listed struct {
		Entries []struct {
			Values map[string]float64 `json:"values"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed.Entries, 1)
	require.Equal(t, map[string]float64{"producer_byte_rate": 5242880}, listed.Entries[0].Values)
	all, err := sdk.DescribeClientQuotas(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all.GetEntries(), 4, "app3 was only validated")

	// Deletion: one key with the CLI, every value of an entity with the
	// CLI, one through Kafka.
	_, err = cli("quota", "delete", "--client-id", "app1", "consumer_byte_rate")
	require.NoError(t, err)
	_, err = cli("quota", "delete", "--user", "alice", "--client-id-default")
	require.NoError(t, err)
	altered, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "ip", Name: str("10.0.0.7")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "connection_creation_rate", Remove: true}}}})
	require.NoError(t, err)
	require.NoError(t, altered[0].Err)
	described, err = adm.DescribeClientQuotas(ctx, false, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		"{client-id=app1}=[producer_byte_rate=1048576.000000]",
		"{user=<default>}=[producer_byte_rate=5242880.000000]",
	}, quotaStrings(described))
	_, err = cli("quota", "delete", "--user", "alice", "--client-id-default")
	require.ErrorContains(t, err, "has no quotas to delete")

	// Audit lines: the controller's for a change made with the CLI (the
	// caller is the admin's certificate), the storage node's for one made
	// over its Kafka listener (the controller sees the storage node).
	auditLine := func(path, resource, change string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `msg="client quota altered"`) && strings.Contains(l, resource) && strings.Contains(l, change) {
				return l
			}
		}
		t.Fatalf("no audit line for %s (%s) in %s", resource, change, path)
		return ""
	}
	line := auditLine(c.Controllers()[0].LogPath, `audit.resource="client-quota:client-id=app1"`, `quota_change="set producer_byte_rate=1048576"`)
	require.Contains(t, line, "audit.principal=User:admin")
	require.Contains(t, line, "audit.host=127.0.0.1")
	line = auditLine(storage.LogPath, `audit.resource="client-quota:ip=10.0.0.7"`, `quota_change="remove connection_creation_rate"`)
	require.Contains(t, line, "audit.principal=User:admin")
	require.Contains(t, line, "listener=kafka")

	// alice, with a certificate of the cluster's CA and no ACLs, may
	// neither change nor list quotas, over Kafka or gRPC.
	aliceTLS := c.userTLS(t, "alice")
	aliceTLS.ServerName = "127.0.0.1"
	alice, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(aliceTLS))
	require.NoError(t, err)
	defer alice.Close()
	refused, err := kadm.NewClient(alice).AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "user", Name: str("alice")}}, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1e9}}}})
	require.NoError(t, err)
	require.ErrorIs(t, refused[0].Err, kerr.ClusterAuthorizationFailed)
	_, err = kadm.NewClient(alice).DescribeClientQuotas(ctx, false, nil)
	require.ErrorIs(t, err, kerr.ClusterAuthorizationFailed)
	cert, key := c.userCertFiles(t, "alice")
	_, err = cliAs(cert, key, "quota", "set", "--user", "alice", "producer_byte_rate=1000000000")
	require.ErrorContains(t, err, "AlterConfigs")
	_, err = cliAs(cert, key, "quota", "list")
	require.Error(t, err)
	all, err = sdk.DescribeClientQuotas(ctx, &controllerv1.DescribeClientQuotasRequest{Components: []*controllerv1.QuotaFilterComponent{
		{Type: "user", MatchType: controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_EXACT, Match: "alice"}}})
	require.NoError(t, err)
	require.Empty(t, all.GetEntries(), "alice's refused change wrote nothing")
	_, err = sdk.DescribeClientQuotas(ctx, &controllerv1.DescribeClientQuotasRequest{Components: []*controllerv1.QuotaFilterComponent{{Type: "group"}}})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), "%v", err)
}

// quotaStrings renders described quotas as sorted "{entity}=[values]".
func quotaStrings(qs kadm.DescribedClientQuotas) []string {
	var out []string
	for _, q := range qs {
		var vals []string
		for _, v := range q.Values {
			vals = append(vals, v.String())
		}
		sort.Strings(vals)
		out = append(out, q.Entity.String()+"=["+strings.Join(vals, " ")+"]")
	}
	sort.Strings(out)
	return out
}
