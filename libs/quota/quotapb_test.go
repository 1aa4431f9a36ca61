package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/quota"
)

// An entry survives the trip through the proto, its components sorted by
// type whatever order they were given in, a default kept apart from an
// empty client id.
func TestEntryProtoRoundTrip(t *testing.T) {
	e := quota.Entry{
		Entity: []quota.Component{{Type: quota.EntityClientID, Default: true}, {Type: quota.EntityUser, Name: "alice"}},
		Values: map[string]float64{quota.ProducerByteRate: 1 << 20, quota.RequestPercentage: 12.5},
	}
	p := quota.EntryToProto(e)
	require.Equal(t, []*controllerv1.QuotaEntityComponent{
		{Type: "user", Name: "alice"}, {Type: "client-id", IsDefault: true},
	}, p.GetEntity())
	b, err := proto.Marshal(p)
	require.NoError(t, err)
	back := &controllerv1.ClientQuotaEntry{}
	require.NoError(t, proto.Unmarshal(b, back))
	got := quota.EntryFromProto(back)
	require.Equal(t, quota.EntityKey(e.Entity), quota.EntityKey(got.Entity))
	require.Equal(t, e.Values, got.Values)
	require.NoError(t, got.Validate())

	empty := quota.EntryFromProto(quota.EntryToProto(quota.Entry{Entity: []quota.Component{{Type: quota.EntityClientID}}, Values: map[string]float64{quota.ConsumerByteRate: 1}}))
	require.False(t, empty.Entity[0].Default, "the empty client id is a name, not the default")
	require.NotEqual(t, quota.EntityKey(empty.Entity), quota.EntityKey([]quota.Component{{Type: quota.EntityClientID, Default: true}}))

	f := quota.Filter{Strict: true, Components: []quota.FilterComponent{{Type: quota.EntityUser, Match: quota.MatchExact, Name: "alice"}, {Type: quota.EntityClientID, Match: quota.MatchAny}}}
	require.Equal(t, f, quota.FilterFromProto(quota.FilterToProto(f)))
}

// Filters match as KIP-546 describes: exact never matches the default,
// default only the default, any both; without strict an entity may have
// components of other types, with strict it may not.
func TestFilterMatches(t *testing.T) {
	user := func(name string) quota.Component { return quota.Component{Type: quota.EntityUser, Name: name} }
	client := func(name string) quota.Component { return quota.Component{Type: quota.EntityClientID, Name: name} }
	defUser := quota.Component{Type: quota.EntityUser, Default: true}
	defClient := quota.Component{Type: quota.EntityClientID, Default: true}
	ip := quota.Component{Type: quota.EntityIP, Name: "10.0.0.1"}
	entities := map[string][]quota.Component{
		"alice":            {user("alice")},
		"alice+app":        {user("alice"), client("app")},
		"alice+<default>":  {user("alice"), defClient},
		"<default>":        {defUser},
		"<default>+app":    {defUser, client("app")},
		"app":              {client("app")},
		"client <default>": {defClient},
		"ip":               {ip},
	}
	exact := func(typ, name string) quota.FilterComponent {
		return quota.FilterComponent{Type: typ, Match: quota.MatchExact, Name: name}
	}
	for _, tc := range []struct {
		name string
		f    quota.Filter
		want []string
	}{
		{"everything", quota.Filter{}, []string{"alice", "alice+app", "alice+<default>", "<default>", "<default>+app", "app", "client <default>", "ip"}},
		{"strict nothing", quota.Filter{Strict: true}, nil},
		{"user alice", quota.Filter{Components: []quota.FilterComponent{exact("user", "alice")}}, []string{"alice", "alice+app", "alice+<default>"}},
		{"user alice strict", quota.Filter{Strict: true, Components: []quota.FilterComponent{exact("user", "alice")}}, []string{"alice"}},
		{"default user", quota.Filter{Components: []quota.FilterComponent{{Type: "user", Match: quota.MatchDefault}}}, []string{"<default>", "<default>+app"}},
		{"any user strict", quota.Filter{Strict: true, Components: []quota.FilterComponent{{Type: "user", Match: quota.MatchAny}}}, []string{"alice", "<default>"}},
		{"client app", quota.Filter{Components: []quota.FilterComponent{exact("client-id", "app")}}, []string{"alice+app", "<default>+app", "app"}},
		{"user and client", quota.Filter{Strict: true, Components: []quota.FilterComponent{{Type: "user", Match: quota.MatchAny}, {Type: "client-id", Match: quota.MatchDefault}}}, []string{"alice+<default>"}},
		{"ip", quota.Filter{Components: []quota.FilterComponent{exact("ip", "10.0.0.1")}}, []string{"ip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			field, problem := tc.f.Validate()
			require.Empty(t, field, problem)
			var got []string
			for name, e := range entities {
				if tc.f.Matches(e) {
					got = append(got, name)
				}
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}
}

// A filter that cannot mean what was asked is refused, naming the field.
func TestFilterValidate(t *testing.T) {
	for _, tc := range []struct {
		f     quota.Filter
		field string
	}{
		{quota.Filter{Components: []quota.FilterComponent{{Type: "users", Match: quota.MatchAny}}}, "components[0].type"},
		{quota.Filter{Components: []quota.FilterComponent{{Type: "user", Match: quota.MatchAny}, {Type: "user", Match: quota.MatchDefault}}}, "components[1].type"},
		{quota.Filter{Components: []quota.FilterComponent{{Type: "user"}}}, "components[0].match_type"},
		{quota.Filter{Components: []quota.FilterComponent{{Type: "user", Match: quota.MatchDefault, Name: "alice"}}}, "components[0].match"},
	} {
		field, problem := tc.f.Validate()
		require.Equal(t, tc.field, field, problem)
		require.NotEmpty(t, problem)
	}
}

// Follow applies the quota set of a snapshot before it returns, replaces
// it with the set a delta carries, keeps it across deltas without one,
// and stops with its context.
func TestFollow(t *testing.T) {
	set := func(rate float64, clients ...string) *controllerv1.QuotaSet {
		s := &controllerv1.QuotaSet{}
		for _, c := range clients {
			s.Entries = append(s.Entries, quota.EntryToProto(quota.Entry{
				Entity: []quota.Component{{Type: quota.EntityClientID, Name: c}}, Values: map[string]float64{quota.ProducerByteRate: rate}}))
		}
		return s
	}
	keys := func(m *quota.Manager) map[string]float64 {
		out := map[string]float64{}
		for _, e := range m.Table().Entries() {
			out[quota.EntityKey(e.Entity)] = e.Values[quota.ProducerByteRate]
		}
		return out
	}
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{Revision: 5, Quotas: set(100, "a")}))
	m := quota.NewManager(quota.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := quota.Follow(ctx, m, cache)
	require.Equal(t, map[string]float64{"client-id=a": 100}, keys(m), "the snapshot's set applies before Follow returns")

	eventually := func(cond func() bool, what string) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			require.True(t, time.Now().Before(deadline), what)
			time.Sleep(time.Millisecond)
		}
	}
	cache.Apply(&controllerv1.MetadataDelta{Revision: 6, Quotas: set(200, "b")})
	eventually(func() bool { _, ok := keys(m)["client-id=b"]; return ok }, "the delta's set applies")
	require.Equal(t, map[string]float64{"client-id=b": 200}, keys(m), "the delta's set replaces the snapshot's")
	cache.Apply(&controllerv1.MetadataDelta{Revision: 7, DeletedTopics: []string{"x"}})
	cache.Apply(&controllerv1.MetadataDelta{Revision: 8, Quotas: set(300, "b", "c")})
	eventually(func() bool { return len(keys(m)) == 2 }, "a later delta applies")
	require.Equal(t, map[string]float64{"client-id=b": 300, "client-id=c": 300}, keys(m))
	cache.Apply(&controllerv1.MetadataDelta{Revision: 9, Quotas: &controllerv1.QuotaSet{}})
	eventually(func() bool { return len(keys(m)) == 0 }, "an empty set removes every quota")

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not stop with its context")
	}
	cache.Apply(&controllerv1.MetadataDelta{Revision: 10, Quotas: set(1, "z")})
	require.Empty(t, keys(m), "a stopped Follow changes nothing")
}
