package metadata_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/authz/authztest"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/metadata"
)

func TestGetMetadataShowsOnlyDescribableTopics(t *testing.T) {
	cache := metadata.NewCache()
	cache.Reset(metadata.FromSnapshot(&controllerv1.MetadataSnapshot{Revision: 3, Topics: []*controllerv1.TopicMetadata{
		{Name: "a", TopicId: "id-a", Partitions: []*commonv1.PartitionState{{Topic: "a", LeaderId: 1, Replicas: []int32{1}}}},
		{Name: "b", TopicId: "id-b", Partitions: []*commonv1.PartitionState{{Topic: "b", LeaderId: 1, Replicas: []int32{1}}}},
	}}))
	ms := metadata.NewServer(cache, 1, grpcx.NewValidators())
	ms.DescribeTopic = authz.DescribeTopic(authztest.New(authztest.Allow("User:alice", authz.Describe, authz.Topic, "a")))
	alice := authztest.Ctx(context.Background(), "alice")

	resp, err := ms.GetMetadata(alice, &metadatav1.GetMetadataRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 1)
	require.Equal(t, "a", resp.GetTopics()[0].GetName())

	// Named: refused whether or not the topic exists.
	resp, err = ms.GetMetadata(alice, &metadatav1.GetMetadataRequest{Topics: []string{"a", "b", "nope"}})
	require.NoError(t, err)
	require.Nil(t, resp.GetTopics()[0].GetError())
	require.Equal(t, errs.TopicAuthorizationFailed, resp.GetTopics()[1].GetError().GetCode())
	require.Empty(t, resp.GetTopics()[1].GetPartitions())
	require.Equal(t, errs.TopicAuthorizationFailed, resp.GetTopics()[2].GetError().GetCode())

	// Authorization off: DescribeTopic is nil and every topic shows.
	require.Nil(t, authz.DescribeTopic(authz.AllowAll{}))
	ms.DescribeTopic = nil
	resp, err = ms.GetMetadata(alice, &metadatav1.GetMetadataRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 2)
}
