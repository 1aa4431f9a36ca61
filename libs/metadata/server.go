package metadata

import (
	"context"
	"slices"

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
	// DescribeTopic, when set, decides which topics a caller may see
	// (Describe on the topic, as Kafka's Metadata): it returns nil when the
	// caller in ctx may, else the refusal (TOPIC_AUTHORIZATION_FAILED).
	// listing says the topic was not named by the caller: the listing
	// leaves it out and the refusal is not audited. A topic named in the
	// request answers with the refusal. Nil shows every topic. (The process
	// sets it from its authorizer, libs/authz, which itself follows this
	// package's metadata.)
	DescribeTopic func(ctx context.Context, topic string, listing bool) error
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
func (s *Server) GetMetadata(ctx context.Context, r *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
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
	listed := len(names) == 0
	if listed {
		names = img.TopicNames(r.GetIncludeInternal())
		if s.DescribeTopic != nil {
			names = slices.DeleteFunc(names, func(n string) bool { return s.DescribeTopic(ctx, n, true) != nil })
		}
	}
	for _, name := range names {
		if !listed && s.DescribeTopic != nil {
			// Refused before the lookup, so a caller without access
			// learns nothing about whether the topic exists.
			if err := s.DescribeTopic(ctx, name, false); err != nil {
				out.Topics = append(out.Topics, &metadatav1.TopicInfo{Name: name, Error: errs.ItemError(err)})
				continue
			}
		}
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
