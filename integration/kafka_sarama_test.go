package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// saramaConfig is sarama's default configuration at the given protocol
// version, acknowledged by every in-sync replica, with timeouts short
// enough that a broker that does not answer fails the test instead of
// stalling it.
func saramaConfig(v sarama.KafkaVersion) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.ClientID = "sluice-compat"
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 15 * time.Second
	cfg.Net.WriteTimeout = 15 * time.Second
	cfg.Metadata.Retry.Max = 20
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Timeout = 10 * time.Second
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	return cfg
}

// saramaMessages returns n messages over a few keys, with zero, one or two
// headers and timestamps 1 ms apart starting an hour ago (not "now", so a
// broker that stamps its own time is caught).
func saramaMessages(topic, prefix string, n int) []*sarama.ProducerMessage {
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range n {
		m := &sarama.ProducerMessage{
			Topic:     topic,
			Key:       sarama.StringEncoder(fmt.Sprintf("%s-key-%d", prefix, i%5)),
			Value:     sarama.StringEncoder(fmt.Sprintf("%s-value-%04d", prefix, i)),
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
			Metadata:  i,
		}
		switch i % 3 {
		case 1:
			m.Headers = []sarama.RecordHeader{{Key: []byte("h"), Value: []byte("1")}}
		case 2:
			m.Headers = []sarama.RecordHeader{{Key: []byte("a"), Value: []byte("x")}, {Key: []byte("b"), Value: fmt.Appendf(nil, "%d", i)}}
		}
		msgs[i] = m
	}
	return msgs
}

// saramaProduced is what a producer reported for a message: where it went
// and what it held.
func saramaProduced(t *testing.T, m *sarama.ProducerMessage) compatRecord {
	t.Helper()
	k, err := m.Key.Encode()
	require.NoError(t, err)
	v, err := m.Value.Encode()
	require.NoError(t, err)
	hs := make([]string, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = string(h.Key) + "=" + string(h.Value)
	}
	return compatRecord{
		Partition: m.Partition, Offset: m.Offset, Key: string(k), Value: string(v),
		Headers: strings.Join(hs, ","), Timestamp: m.Timestamp.UnixMilli(),
	}
}

// saramaConsume reads every partition of topic from the oldest offset with
// sarama's partition consumers until each has given want[p] records, and
// checks that nothing more arrives and the high watermark is where the
// last record ended.
func saramaConsume(t *testing.T, addrs []string, cfg *sarama.Config, topic string, want map[int32]int) []compatRecord {
	t.Helper()
	consumer, err := sarama.NewConsumer(addrs, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, consumer.Close()) }()
	parts, err := consumer.Partitions(topic)
	require.NoError(t, err)
	require.Len(t, parts, len(want), "partitions of %s", topic)
	var recs []compatRecord
	deadline := time.After(30 * time.Second)
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err, "partition %d", p)
		for n := 0; n < want[p]; {
			select {
			case m := <-pc.Messages():
				hs := make([]string, len(m.Headers))
				for i, h := range m.Headers {
					hs[i] = string(h.Key) + "=" + string(h.Value)
				}
				recs = append(recs, compatRecord{
					Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: string(m.Value),
					Headers: strings.Join(hs, ","), Timestamp: m.Timestamp.UnixMilli(),
				})
				n++
			case err := <-pc.Errors():
				require.NoError(t, err, "consuming partition %d", p)
			case <-deadline:
				t.Fatalf("partition %d: %d of %d records within 30 s", p, n, want[p])
			}
		}
		select {
		case m := <-pc.Messages():
			t.Fatalf("partition %d: a record past the %d produced: offset %d", p, want[p], m.Offset)
		case <-time.After(200 * time.Millisecond):
		}
		require.Equal(t, int64(want[p]), pc.HighWaterMarkOffset(), "high watermark of partition %d", p)
		require.NoError(t, pc.Close())
	}
	sortCompatRecords(recs)
	return recs
}

// saramaCheck reads topic back with sarama and over gRPC and compares both
// with what the producer reported.
func saramaCheck(t *testing.T, c *devcluster.Cluster, cl *client.Client, cfg *sarama.Config, topic string, partitions int32, produced []compatRecord) {
	t.Helper()
	sortCompatRecords(produced)
	compatRequireContiguous(t, produced)
	want := map[int32]int{}
	for p := range partitions {
		want[p] = 0
	}
	for _, r := range produced {
		want[r.Partition]++
	}
	require.Equal(t, produced, saramaConsume(t, c.KafkaBootstrap(), cfg, topic, want), "sarama reads what sarama produced")
	require.Equal(t, produced, compatReadGRPC(t, cl, topic, partitions), "the SDK reads over gRPC what sarama produced")

	// ListOffsets through sarama's client agrees.
	sc, err := sarama.NewClient(c.KafkaBootstrap(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, sc.Close()) }()
	for p := range partitions {
		oldest, err := sc.GetOffset(topic, p, sarama.OffsetOldest)
		require.NoError(t, err, "oldest offset of partition %d", p)
		require.Zero(t, oldest, "oldest offset of partition %d", p)
		newest, err := sc.GetOffset(topic, p, sarama.OffsetNewest)
		require.NoError(t, err, "newest offset of partition %d", p)
		require.Equal(t, int64(want[p]), newest, "newest offset of partition %d", p)
	}
}

// IBM/sarama against Sluice's Kafka listener on one controller and three
// storage nodes: the sync producer and the idempotent async producer
// (acks=all), read back with partition consumers and over gRPC, at a
// modern protocol version and at sarama's default one; each codec; and
// sarama's default configuration.
func TestKafkaSarama(t *testing.T) {
	sideBySide(t)
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 3})
	cl := cluster.Client(t, c)
	require.NotEmpty(t, c.KafkaBootstrap())
	for _, v := range []struct {
		name    string
		version sarama.KafkaVersion
	}{
		{"V3_6_0_0", sarama.V3_6_0_0},
		// sarama's default (V2_8_0_0 in v1.61.1) is what an application
		// that never sets Version speaks.
		{"default-version", sarama.NewConfig().Version},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Run("sync-producer", func(t *testing.T) {
				topic := "sarama-sync-" + v.name
				compatCreateTopic(t, cl, topic, 3, 3)
				cfg := saramaConfig(v.version)
				p, err := sarama.NewSyncProducer(c.KafkaBootstrap(), cfg)
				require.NoError(t, err)
				msgs := saramaMessages(topic, "sync", 120)
				// One at a time, then the rest in one call.
				for _, m := range msgs[:20] {
					part, off, err := p.SendMessage(m)
					require.NoError(t, err)
					require.Equal(t, m.Partition, part)
					require.Equal(t, m.Offset, off)
				}
				require.NoError(t, p.SendMessages(msgs[20:]))
				require.NoError(t, p.Close())
				var produced []compatRecord
				for _, m := range msgs {
					produced = append(produced, saramaProduced(t, m))
				}
				saramaCheck(t, c, cl, cfg, topic, 3, produced)
			})

			t.Run("async-idempotent-producer", func(t *testing.T) {
				topic := "sarama-async-" + v.name
				compatCreateTopic(t, cl, topic, 3, 3)
				cfg := saramaConfig(v.version)
				// sarama's idempotent producer needs one request in flight
				// per broker and acks=all.
				cfg.Producer.Idempotent = true
				cfg.Net.MaxOpenRequests = 1
				cfg.Producer.Return.Errors = true
				p, err := sarama.NewAsyncProducer(c.KafkaBootstrap(), cfg)
				require.NoError(t, err)
				msgs := saramaMessages(topic, "async", 600)
				outcomes := make(chan error, len(msgs))
				done := make(chan struct{})
				go func() {
					defer close(done)
					for range msgs {
						select {
						case <-p.Successes():
							outcomes <- nil
						case perr := <-p.Errors():
							outcomes <- fmt.Errorf("message %v: %w", perr.Msg.Metadata, perr.Err)
						}
					}
				}()
				deadline := time.After(30 * time.Second)
				for i, m := range msgs {
					select {
					case p.Input() <- m:
					case <-deadline:
						t.Fatalf("the producer took %d of %d messages within 30 s", i, len(msgs))
					}
				}
				select {
				case <-done:
				case <-deadline:
					t.Fatalf("%d of %d outcomes within 30 s", len(outcomes), len(msgs))
				}
				for range msgs {
					require.NoError(t, <-outcomes)
				}
				require.NoError(t, p.Close())
				var produced []compatRecord
				for _, m := range msgs {
					produced = append(produced, saramaProduced(t, m))
				}
				saramaCheck(t, c, cl, cfg, topic, 3, produced)
			})
		})
	}

	t.Run("codecs", func(t *testing.T) {
		// sarama's own compressors (not franz-go's) for each codec.
		for _, codec := range []sarama.CompressionCodec{sarama.CompressionGZIP, sarama.CompressionSnappy, sarama.CompressionLZ4, sarama.CompressionZSTD} {
			t.Run(codec.String(), func(t *testing.T) {
				topic := "sarama-codec-" + codec.String()
				compatCreateTopic(t, cl, topic, 2, 3)
				cfg := saramaConfig(sarama.V3_6_0_0)
				cfg.Producer.Compression = codec
				p, err := sarama.NewSyncProducer(c.KafkaBootstrap(), cfg)
				require.NoError(t, err)
				msgs := saramaMessages(topic, codec.String(), 100)
				require.NoError(t, p.SendMessages(msgs))
				require.NoError(t, p.Close())
				var produced []compatRecord
				for _, m := range msgs {
					produced = append(produced, saramaProduced(t, m))
				}
				saramaCheck(t, c, cl, cfg, topic, 2, produced)
			})
		}
	})

	t.Run("default-config", func(t *testing.T) {
		// Nothing set but what a sync producer requires: default version,
		// acks=1 (WaitForLocal), no idempotence.
		topic := "sarama-defaults"
		compatCreateTopic(t, cl, topic, 2, 3)
		cfg := sarama.NewConfig()
		cfg.Producer.Return.Successes = true
		p, err := sarama.NewSyncProducer(c.KafkaBootstrap(), cfg)
		require.NoError(t, err)
		msgs := saramaMessages(topic, "defaults", 50)
		require.NoError(t, p.SendMessages(msgs))
		require.NoError(t, p.Close())
		var produced []compatRecord
		for _, m := range msgs {
			produced = append(produced, saramaProduced(t, m))
		}
		saramaCheck(t, c, cl, cfg, topic, 2, produced)
	})
}
