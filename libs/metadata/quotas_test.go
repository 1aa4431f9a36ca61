package metadata

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// The quota set comes with a snapshot, is replaced by a delta that carries
// one, kept by a delta that does not, and goes out again in a snapshot.
func TestImageQuotas(t *testing.T) {
	set := func(client string) *controllerv1.QuotaSet {
		return &controllerv1.QuotaSet{Entries: []*controllerv1.ClientQuotaEntry{{
			Entity: []*controllerv1.QuotaEntityComponent{{Type: "client-id", Name: client}},
			Values: map[string]float64{"producer_byte_rate": 1024},
		}}}
	}
	img := FromSnapshot(&controllerv1.MetadataSnapshot{Revision: 1, Quotas: set("a")})
	require.True(t, proto.Equal(set("a"), img.Quotas))
	img = img.Apply(&controllerv1.MetadataDelta{Revision: 2, DeletedTopics: []string{"x"}})
	require.True(t, proto.Equal(set("a"), img.Quotas), "a delta without quotas keeps them")
	img = img.Apply(&controllerv1.MetadataDelta{Revision: 3, Quotas: set("b")})
	require.True(t, proto.Equal(set("b"), img.Quotas))
	require.True(t, proto.Equal(set("b"), img.Snapshot().GetQuotas()))
	img = img.Apply(&controllerv1.MetadataDelta{Revision: 4, Quotas: &controllerv1.QuotaSet{}})
	require.Empty(t, img.Quotas.GetEntries(), "an empty set removes every quota")
}
