package metadata

import (
	"context"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/naming"
)

// Server answers MetadataService from a Cache. Every Sluice process runs
// one, whatever its roles.
type Server struct {
	metadatav1.UnimplementedMetadataServiceServer
	cache  *Cache
	nodeID int32
}

// NewServer returns a MetadataService over cache and registers its
// validator.
func NewServer(cache *Cache, nodeID int32, v *grpcx.Validators) *Server {
	grpcx.Register(v, func(r *metadatav1.GetMetadataRequest) error {
		var f errs.Fields
		for i, t := range r.GetTopics() {
			if err := naming.ValidateTopic(t); err != nil {
				f.Add("topics["+itoa(i)+"]", "%v", err)
			}
		}
		return f.ErrCode(errs.InvalidTopic)
	})
	return &Server{cache: cache, nodeID: nodeID}
}

// GetMetadata implements MetadataService.
func (s *Server) GetMetadata(_ context.Context, r *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	if !s.cache.Loaded() {
		return nil, errs.New(errs.NodeNotReady, "node %d has not received cluster metadata from a controller yet", s.nodeID)
	}
	img := s.cache.Load()
	out := &metadatav1.GetMetadataResponse{
		ClusterId:         img.ClusterID,
		ControllerId:      img.ControllerID,
		ControllerAddress: img.ControllerAddress(),
		Revision:          img.Revision,
		AnsweredBy:        s.nodeID,
	}
	for _, id := range img.BrokerIDs() {
		out.Brokers = append(out.Brokers, img.Brokers[id])
	}
	names := r.GetTopics()
	if len(names) == 0 {
		names = img.TopicNames(r.GetIncludeInternal())
	}
	for _, name := range names {
		t, ok := img.Topics[name]
		if !ok {
			out.Topics = append(out.Topics, &metadatav1.TopicInfo{
				Name:  name,
				Error: errs.New(errs.UnknownTopicOrPartition, "topic %q does not exist", name).Proto(),
			})
			continue
		}
		out.Topics = append(out.Topics, &metadatav1.TopicInfo{Name: name, TopicId: t.ID, Internal: t.Internal, Partitions: t.Partitions})
	}
	return out, nil
}
