package integration

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/role"
)

// TestKafkaListener: every process of a split cluster (controller, storage
// nodes, a group coordinator of its own) answers ApiVersions to franz-go on
// its Kafka address, and every process that registers with the controller
// carries that address as its "kafka" endpoint in cluster metadata, which
// Kafka's Metadata from any process lists.
func TestKafkaListener(t *testing.T) {
	c := cluster.Start(t, cluster.Options{StorageNodes: 2, GroupCoordinators: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("ApiVersions", func(t *testing.T) {
		for _, p := range c.Processes() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(p.KafkaAddr), kgo.ClientID("sluice-listener-test"))
			require.NoError(t, err)
			// kgo opens the connection with the newest ApiVersions it
			// knows (v5), is told UNSUPPORTED_VERSION with the versions
			// served, and retries with v4 (KIP-511).
			req := kmsg.NewPtrApiVersionsRequest()
			req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-listener-test", "1.0"
			resp, err := cl.SeedBrokers()[0].Request(ctx, req)
			cl.Close()
			require.NoError(t, err, p.Name)
			av := resp.(*kmsg.ApiVersionsResponse)
			require.Zero(t, av.ErrorCode, p.Name)
			require.Contains(t, av.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: 18, MinVersion: 0, MaxVersion: 4}, p.Name)
		}
	})

	t.Run("KafkaMetadataListsEveryMember", func(t *testing.T) {
		want := map[int32]string{}
		for _, p := range c.Processes() {
			if len(p.Roles.Without(role.Controller)) > 0 {
				want[p.NodeID] = p.KafkaAddr
			}
		}
		for _, p := range c.Processes() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(p.KafkaAddr))
			require.NoError(t, err)
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				resp, err := cl.SeedBrokers()[0].Request(ctx, kmsg.NewPtrMetadataRequest())
				if !assert.NoError(ct, err) {
					return
				}
				got := map[int32]string{}
				for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
					got[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
				}
				assert.Equal(ct, want, got, "Metadata from %s", p.Name)
			}, 20*time.Second, 100*time.Millisecond)
			cl.Close()
		}
	})

	t.Run("MetadataCarriesKafkaEndpoints", func(t *testing.T) {
		conn, err := grpc.NewClient(c.Controllers()[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		md := metadatav1.NewMetadataServiceClient(conn)
		// Processes that run only the controller role are not brokers
		// and do not register.
		var members []string
		for _, p := range c.Processes() {
			if len(p.Roles.Without(role.Controller)) > 0 {
				members = append(members, p.Name)
			}
		}
		require.Len(t, members, 3)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			resp, err := md.GetMetadata(ctx, &metadatav1.GetMetadataRequest{})
			if !assert.NoError(ct, err) {
				return
			}
			for _, name := range members {
				p := c.Process(name)
				var found bool
				for _, b := range resp.GetBrokers() {
					if b.GetId() != p.NodeID {
						continue
					}
					found = true
					e := metadata.KafkaEndpoint(b)
					if assert.NotNil(ct, e, "%s has no kafka endpoint: %v", name, b.GetEndpoints()) {
						assert.Equal(ct, p.KafkaAddr, net.JoinHostPort(e.GetHost(), strconv.Itoa(int(e.GetPort()))), name)
					}
				}
				assert.True(ct, found, "%s is not in metadata", name)
			}
		}, 20*time.Second, 100*time.Millisecond)
	})
}
