package nodeapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// The quota APIs need DescribeConfigs / AlterConfigs on the cluster before
// anything is forwarded (every entry of a refused alter is refused), and a
// filter Kafka's clients can send but that means nothing is refused with
// what to send instead.
func TestClientQuotasKafka(t *testing.T) {
	a := authztest.New(
		authztest.Allow("User:ops", authz.DescribeConfigs, authz.Cluster, authz.ClusterName),
		authztest.Allow("User:admin", authz.AlterConfigs, authz.Cluster, authz.ClusterName))
	n := testNode(t, a)
	bob := authztest.Ctx(context.Background(), "bob")
	ops := authztest.Ctx(context.Background(), "ops")

	alter := kmsg.NewPtrAlterClientQuotasRequest()
	for _, client := range []string{"app1", "app2"} {
		e := kmsg.NewAlterClientQuotasRequestEntry()
		e.Entity = []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "client-id", Name: kmsg.StringPtr(client)}}
		e.Ops = []kmsg.AlterClientQuotasRequestEntryOp{{Key: "producer_byte_rate", Value: 1 << 20}}
		alter.Entries = append(alter.Entries, e)
	}
	for _, who := range []context.Context{bob, ops} {
		resp := n.alterClientQuotas(who, alter)
		require.Len(t, resp.Entries, 2)
		for _, e := range resp.Entries {
			require.Equal(t, code(errs.ClusterAuthorizationFailed), e.ErrorCode, "DescribeConfigs does not allow a change")
			require.Equal(t, "app1", *resp.Entries[0].Entity[0].Name, "each result names its entity")
			require.Contains(t, *e.ErrorMessage, "AlterConfigs")
		}
	}

	describe := kmsg.NewPtrDescribeClientQuotasRequest()
	resp := n.describeClientQuotas(bob, describe)
	require.Equal(t, code(errs.ClusterAuthorizationFailed), resp.ErrorCode)
	describe.Components = []kmsg.DescribeClientQuotasRequestComponent{{EntityType: "user", MatchType: kmsg.QuotasMatchTypeExact}}
	resp = n.describeClientQuotas(ops, describe)
	require.Equal(t, code(errs.InvalidRequest), resp.ErrorCode)
	require.Contains(t, *resp.ErrorMessage, "use match type 1 for the default")
	describe.Components[0].MatchType = 7
	resp = n.describeClientQuotas(ops, describe)
	require.Equal(t, code(errs.InvalidRequest), resp.ErrorCode)
	require.Contains(t, *resp.ErrorMessage, "want exact (0), default (1) or any (2)")
}

// A null name is the default component, in both directions.
func TestQuotaComponentDefault(t *testing.T) {
	c := quotaComponent("user", nil)
	require.True(t, c.GetIsDefault())
	require.Nil(t, kafkaQuotaName(c))
	c = quotaComponent("client-id", kmsg.StringPtr(""))
	require.False(t, c.GetIsDefault(), "the empty client id is a name")
	require.Equal(t, "", *kafkaQuotaName(c))
}
