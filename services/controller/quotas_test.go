package controller

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/quota"
	"github.com/sluice-io/sluice/libs/testutil"
)

// lockedBuffer is a log sink the controller's goroutines may write to
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func clientIDEntity(name string) []*controllerv1.QuotaEntityComponent {
	return []*controllerv1.QuotaEntityComponent{{Type: quota.EntityClientID, Name: name}}
}

func setOp(key string, v float64) *controllerv1.ClientQuotaOp {
	return &controllerv1.ClientQuotaOp{Key: key, Value: v}
}

// Client quotas are stored in etcd one entity per key, validated per
// entity, authorized (AlterConfigs / DescribeConfigs on the cluster),
// audited, carried in the metadata image, filtered as KIP-546 says, and
// loaded again by a restarted controller.
func TestClientQuotas(t *testing.T) {
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, own, addr := startAuthzController(t, ctx, logger)
	admin := auth.NewContext(ctx, auth.Identity{Principal: auth.User("admin"), Host: "10.1.2.3"})
	alice := auth.NewContext(ctx, auth.Identity{Principal: auth.User("alice"), Host: "10.1.2.4"})

	app1 := &controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("app1"), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 1048576)}}

	// Both calls are authorized on the cluster; a refused change writes
	// nothing.
	_, err := c.AlterClientQuotas(alice, &controllerv1.AlterClientQuotasRequest{Entries: []*controllerv1.ClientQuotaAlteration{app1}})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "%v", err)
	_, err = c.DescribeClientQuotas(alice, &controllerv1.DescribeClientQuotasRequest{})
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "%v", err)
	_, err = c.AlterClientQuotas(admin, &controllerv1.AlterClientQuotasRequest{})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))

	// validate_only answers like a real change and writes nothing.
	resp, err := c.AlterClientQuotas(admin, &controllerv1.AlterClientQuotasRequest{Entries: []*controllerv1.ClientQuotaAlteration{app1}, ValidateOnly: true})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	desc, err := c.DescribeClientQuotas(admin, &controllerv1.DescribeClientQuotasRequest{})
	require.NoError(t, err)
	require.Empty(t, desc.GetEntries(), "validate_only wrote a quota")

	// Valid entries are written; each invalid one is answered in its slot
	// with a message that says what to fix, and changes nothing.
	aliceApp := &controllerv1.ClientQuotaAlteration{
		Entity: []*controllerv1.QuotaEntityComponent{{Type: quota.EntityClientID, Name: "app1"}, {Type: quota.EntityUser, Name: "alice"}},
		Ops:    []*controllerv1.ClientQuotaOp{setOp(quota.ConsumerByteRate, 2e6), setOp(quota.RequestPercentage, 25)},
	}
	defUser := &controllerv1.ClientQuotaAlteration{
		Entity: []*controllerv1.QuotaEntityComponent{{Type: quota.EntityUser, IsDefault: true}},
		Ops:    []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 5e6)},
	}
	ip := &controllerv1.ClientQuotaAlteration{
		Entity: []*controllerv1.QuotaEntityComponent{{Type: quota.EntityIP, Name: "10.0.0.7"}},
		Ops:    []*controllerv1.ClientQuotaOp{setOp(quota.ConnectionCreationRate, 20)},
	}
	bad := map[int]struct {
		a    *controllerv1.ClientQuotaAlteration
		want string
	}{
		1:  {&controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("x"), Ops: []*controllerv1.ClientQuotaOp{setOp("producer_rate", 1)}}, "unknown quota key"},
		2:  {&controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("x"), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 0)}}, "positive"},
		3:  {&controllerv1.ClientQuotaAlteration{Entity: []*controllerv1.QuotaEntityComponent{{Type: quota.EntityIP, Name: "db.example.com"}}, Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ConnectionCreationRate, 1)}}, "not an IP address"},
		4:  {&controllerv1.ClientQuotaAlteration{Entity: []*controllerv1.QuotaEntityComponent{{Type: quota.EntityIP, Name: "10.0.0.1"}, {Type: quota.EntityUser, Name: "bob"}}, Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 1)}}, "ip quotas stand alone"},
		5:  {&controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("x"), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 1), {Key: quota.ProducerByteRate, Remove: true}}}, "changed twice"},
		6:  {&controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("x")}, "no quota to set or remove"},
		7:  {&controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("app1"), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ConsumerByteRate, 1)}}, "also changed by entries[0]"},
		8:  {&controllerv1.ClientQuotaAlteration{Entity: []*controllerv1.QuotaEntityComponent{{Type: "group", Name: "g"}}, Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 1)}}, "unknown quota entity type"},
		9:  {&controllerv1.ClientQuotaAlteration{Entity: clientIDEntity("x"), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ConnectionCreationRate, 1)}}, "applies to ip entities"},
		10: {&controllerv1.ClientQuotaAlteration{Entity: []*controllerv1.QuotaEntityComponent{{Type: quota.EntityUser, Name: "<default>"}}, Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, 1)}}, "set is_default"},
	}
	entries := []*controllerv1.ClientQuotaAlteration{app1}
	for i := 1; i <= len(bad); i++ {
		entries = append(entries, bad[i].a)
	}
	entries = append(entries, aliceApp, defUser, ip)
	resp, err = c.AlterClientQuotas(admin, &controllerv1.AlterClientQuotasRequest{Entries: entries})
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), len(entries))
	for i, r := range resp.GetResults() {
		require.Equal(t, entries[i].GetEntity(), r.GetEntity(), "result %d names its entity", i)
		if b, ok := bad[i]; ok {
			require.Equal(t, errs.InvalidRequest, r.GetError().GetCode(), "entry %d", i)
			require.Contains(t, r.GetError().GetMessage(), b.want, "entry %d", i)
		} else {
			require.Nil(t, r.GetError(), "entry %d", i)
		}
	}

	desc, err = c.DescribeClientQuotas(admin, &controllerv1.DescribeClientQuotasRequest{})
	require.NoError(t, err)
	var keys []string
	for _, e := range desc.GetEntries() {
		keys = append(keys, quota.EntityKey(quota.EntityFromProto(e.GetEntity())))
	}
	require.Equal(t, []string{"client-id=app1", "ip=10.0.0.7", "user=<default>", "user=alice,client-id=app1"}, keys, "sorted by entity key")
	require.Equal(t, map[string]float64{quota.ConsumerByteRate: 2e6, quota.RequestPercentage: 25}, desc.GetEntries()[3].GetValues())
	require.Equal(t, "user", desc.GetEntries()[3].GetEntity()[0].GetType(), "components are stored sorted by type")

	// Filters: exact, default, any, strict.
	describe := func(strict bool, cs ...*controllerv1.QuotaFilterComponent) []string {
		t.Helper()
		d, err := c.DescribeClientQuotas(admin, &controllerv1.DescribeClientQuotasRequest{Components: cs, Strict: strict})
		require.NoError(t, err)
		var out []string
		for _, e := range d.GetEntries() {
			out = append(out, quota.EntityKey(quota.EntityFromProto(e.GetEntity())))
		}
		return out
	}
	exact := func(typ, name string) *controllerv1.QuotaFilterComponent {
		return &controllerv1.QuotaFilterComponent{Type: typ, MatchType: controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_EXACT, Match: name}
	}
	require.Equal(t, []string{"client-id=app1", "user=alice,client-id=app1"}, describe(false, exact("client-id", "app1")))
	require.Equal(t, []string{"client-id=app1"}, describe(true, exact("client-id", "app1")))
	require.Equal(t, []string{"user=<default>"}, describe(false, &controllerv1.QuotaFilterComponent{Type: "user", MatchType: controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_DEFAULT}))
	require.Equal(t, []string{"user=<default>", "user=alice,client-id=app1"}, describe(false, &controllerv1.QuotaFilterComponent{Type: "user", MatchType: controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_ANY}))
	require.Equal(t, []string{"ip=10.0.0.7"}, describe(true, exact("ip", "10.0.0.7")))
	_, err = c.DescribeClientQuotas(admin, &controllerv1.DescribeClientQuotasRequest{Components: []*controllerv1.QuotaFilterComponent{{Type: "user"}}})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))
	require.Contains(t, err.Error(), "match type")

	// The metadata image carries the set to every process.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := len(c.deps.Metadata.Load().Quotas.GetEntries()); n != 4 {
			return errors.New("the metadata image does not carry the quotas yet")
		}
		return nil
	})

	// Every change has an audit line: who, from where, what.
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"client quota altered"`) && strings.Contains(l, "user=alice,client-id=app1") {
			line = l
		}
	}
	require.NotEmpty(t, line, "no audit line for the change of user=alice,client-id=app1")
	for _, want := range []string{`"principal":"User:admin"`, `"host":"10.1.2.3"`, `"operation":"AlterClientQuotas"`,
		`"quota_change":"set consumer_byte_rate=2000000 set request_percentage=25"`, `"decision":"allow"`} {
		require.Contains(t, line, want)
	}
	require.Equal(t, 4, strings.Count(logs.String(), `"client quota altered"`), "one line per change; refused and validate-only entries write none")

	// Removing a value keeps the others; removing the last deletes the
	// entity's key; other values of an entity are kept by a set.
	resp, err = c.AlterClientQuotas(admin, &controllerv1.AlterClientQuotasRequest{Entries: []*controllerv1.ClientQuotaAlteration{
		{Entity: aliceApp.GetEntity(), Ops: []*controllerv1.ClientQuotaOp{{Key: quota.RequestPercentage, Remove: true}}},
		{Entity: clientIDEntity("app1"), Ops: []*controllerv1.ClientQuotaOp{{Key: quota.ProducerByteRate, Remove: true}}},
		{Entity: defUser.GetEntity(), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ConsumerByteRate, 7e6)}},
	}})
	require.NoError(t, err)
	for _, r := range resp.GetResults() {
		require.Nil(t, r.GetError())
	}
	require.Equal(t, []string{"user=alice,client-id=app1"}, describe(false, exact("client-id", "app1")))
	d, err := c.DescribeClientQuotas(admin, &controllerv1.DescribeClientQuotasRequest{Components: []*controllerv1.QuotaFilterComponent{exact("user", "alice")}})
	require.NoError(t, err)
	require.Equal(t, map[string]float64{quota.ConsumerByteRate: 2e6}, d.GetEntries()[0].GetValues())
	d, err = c.DescribeClientQuotas(admin, &controllerv1.DescribeClientQuotasRequest{Components: []*controllerv1.QuotaFilterComponent{{Type: "user", MatchType: controllerv1.QuotaMatchType_QUOTA_MATCH_TYPE_DEFAULT}}})
	require.NoError(t, err)
	require.Equal(t, map[string]float64{quota.ProducerByteRate: 5e6, quota.ConsumerByteRate: 7e6}, d.GetEntries()[0].GetValues())
	c.mu.RLock()
	n := len(c.st.quotas)
	c.mu.RUnlock()
	require.Equal(t, 3, n, "the entity left without values was deleted from etcd")

	// Another process (its own cache from the controller's watch stream,
	// a quota Manager following it): how long from AlterClientQuotas
	// returning to that Manager enforcing the new value.
	remoteCache := remoteMetadata(t, ctx, c, own, addr)
	remote := quota.NewManager(quota.Options{})
	quota.Follow(ctx, remote, remoteCache)
	remoteValue := func() float64 {
		for _, e := range remote.Table().Entries() {
			if quota.EntityKey(e.Entity) == "client-id=lat" {
				return e.Values[quota.ProducerByteRate]
			}
		}
		return 0
	}
	const rounds = 20
	var lat []time.Duration
	for i := 1; i <= rounds; i++ {
		_, err := c.AlterClientQuotas(admin, &controllerv1.AlterClientQuotasRequest{Entries: []*controllerv1.ClientQuotaAlteration{
			{Entity: clientIDEntity("lat"), Ops: []*controllerv1.ClientQuotaOp{setOp(quota.ProducerByteRate, float64(i))}}}})
		require.NoError(t, err)
		start := time.Now()
		for remoteValue() != float64(i) {
			require.Less(t, time.Since(start), 10*time.Second, "quota change %d never reached the other process", i)
			time.Sleep(50 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("quota change to another process's Manager over %d rounds: p50 %v max %v", rounds, lat[rounds/2], lat[rounds-1])
	_, err = c.AlterClientQuotas(admin, &controllerv1.AlterClientQuotasRequest{Entries: []*controllerv1.ClientQuotaAlteration{
		{Entity: clientIDEntity("lat"), Ops: []*controllerv1.ClientQuotaOp{{Key: quota.ProducerByteRate, Remove: true}}}}})
	require.NoError(t, err)

	// A restarted controller loads the quotas from etcd.
	etcd, dir := c.cfg.Etcd, c.deps.Node.DataDir
	stopController(t, c)
	c = startActiveController(t, etcd, dir)
	defer stopController(t, c)
	d, err = c.DescribeClientQuotas(ctx, &controllerv1.DescribeClientQuotasRequest{})
	require.NoError(t, err)
	require.Len(t, d.GetEntries(), 3)
	require.Equal(t, map[string]float64{quota.ConnectionCreationRate: 20}, d.GetEntries()[0].GetValues())
}
