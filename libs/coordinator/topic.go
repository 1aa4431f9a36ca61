package coordinator

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metadata"
)

// TopicSpec is how an internal topic is created.
type TopicSpec struct {
	Name       string
	Partitions int
	// ReplicationFactor is capped by the live storage nodes at creation.
	ReplicationFactor int
	// MinInsyncReplicas is min.insync.replicas, capped by the replication
	// factor; 0 leaves the cluster default.
	MinInsyncReplicas int
	// Configs are the topic configs besides Kafka's internal-topic ones
	// (compacted, 100 MiB segments, the producer's compression), which
	// Create always sets.
	Configs map[string]string
}

// TopicCreator creates an internal topic through the active controller, in
// the background and one request at a time: lookups that find the topic
// missing answer COORDINATOR_NOT_AVAILABLE and clients retry, as Kafka's
// FindCoordinator does while it creates __consumer_offsets.
type TopicCreator struct {
	Pool   *wire.Pool
	Logger *slog.Logger

	mu       sync.Mutex
	creating map[string]bool
}

// Create starts creating spec's topic unless a creation of it is in flight.
func (tc *TopicCreator) Create(img *metadata.Image, spec TopicSpec) {
	tc.mu.Lock()
	if tc.creating[spec.Name] {
		tc.mu.Unlock()
		return
	}
	if tc.creating == nil {
		tc.creating = map[string]bool{}
	}
	tc.creating[spec.Name] = true
	tc.mu.Unlock()
	live := 0
	for _, b := range img.Brokers {
		if metadataHasRole(b.GetRoles(), "storage-node") && img.Alive(b.GetId()) {
			live++
		}
	}
	rf := min(spec.ReplicationFactor, max(live, 1))
	configs := map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600", "compression.type": "producer"}
	if spec.MinInsyncReplicas > 0 {
		configs["min.insync.replicas"] = strconv.Itoa(min(spec.MinInsyncReplicas, rf))
	}
	for k, v := range spec.Configs {
		configs[k] = v
	}
	addr := img.ControllerAddress()
	go func() {
		defer func() {
			tc.mu.Lock()
			delete(tc.creating, spec.Name)
			tc.mu.Unlock()
		}()
		if addr == "" {
			tc.Logger.Warn("internal topic not created: no active controller known", log.Topic(spec.Name))
			return
		}
		conn, err := tc.Pool.Get(addr)
		if err != nil {
			tc.Logger.Warn("internal topic not created", log.Topic(spec.Name), log.Err(err))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := controllerv1.NewControllerServiceClient(conn).CreateTopics(ctx, &controllerv1.CreateTopicsRequest{
			Topics: []*controllerv1.TopicSpec{{
				Name: spec.Name, NumPartitions: proto.Int32(int32(spec.Partitions)), ReplicationFactor: proto.Int32(int32(rf)),
				// Kafka's settings for the topic: compacted, and segments
				// small enough that compaction keeps replay short.
				Configs: configs,
			}},
		})
		if err == nil && len(resp.GetResults()) == 1 && resp.GetResults()[0].GetError() != nil &&
			resp.GetResults()[0].GetError().GetCode() != edpb.ErrorCode_ERROR_CODE_TOPIC_ALREADY_EXISTS {
			err = errs.FromProto(resp.GetResults()[0].GetError())
		}
		if err != nil {
			tc.Logger.Warn("internal topic not created", log.Topic(spec.Name), log.Err(err))
			return
		}
		tc.Logger.Info("internal topic created", log.Topic(spec.Name), slog.Int("partitions", spec.Partitions), slog.Int("replication_factor", rf))
	}()
}

func metadataHasRole(roles []string, want string) bool {
	for _, r := range roles {
		if r == want {
			return true
		}
	}
	return false
}
