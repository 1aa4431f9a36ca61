package integration

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
)

const (
	quotaRate      = 1 << 20 // producer_byte_rate of the throttled clients, bytes/s
	quotaRun       = 15 * time.Second
	quotaMeasured  = 10 * time.Second // the last part of the run, after convergence
	quotaOffered   = 4 << 20          // what the unthrottled clients offer, bytes/s
	quotaValueSize = 1024
	quotaMaxConns  = 16
)

// ackMeter sums the bytes of acknowledged records per 100 ms.
type ackMeter struct {
	start time.Time
	mu    sync.Mutex
	slots map[int]int64
}

func newAckMeter(start time.Time) *ackMeter { return &ackMeter{start: start, slots: map[int]int64{}} }

func (m *ackMeter) add(n int) {
	slot := int(time.Since(m.start) / (100 * time.Millisecond))
	m.mu.Lock()
	m.slots[slot] += int64(n)
	m.mu.Unlock()
}

// rate is the bytes per second acknowledged between from and to after start.
func (m *ackMeter) rate(from, to time.Duration) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum int64
	for s := int(from / (100 * time.Millisecond)); s < int(to/(100*time.Millisecond)); s++ {
		sum += m.slots[s]
	}
	return float64(sum) / (to - from).Seconds()
}

// paced calls send with batches of records at quotaOffered until ctx ends,
// or as fast as send returns when unpaced.
func paced(ctx context.Context, unpaced bool, send func()) {
	const tick = 10 * time.Millisecond
	per := int(float64(quotaOffered) * tick.Seconds() / quotaValueSize)
	t := time.NewTicker(tick)
	defer t.Stop()
	for ctx.Err() == nil {
		if unpaced {
			send()
			continue
		}
		for range per {
			send()
		}
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

type throttleHook struct{ count, total atomic.Int64 }

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.count.Add(1)
		h.total.Add(int64(d))
	}
}

// TestQuotaProduceRate: a producer_byte_rate of 1 MiB/s on a client id,
// set through Kafka's AlterClientQuotas, holds that client's produce rate
// within 10 % of the quota on the Kafka listener (franz-go) and on gRPC
// (the SDK) alike, tells it to back off (throttle_time_ms), and leaves
// other clients of the same node unthrottled; meanwhile a
// consumer_byte_rate of 1 MiB/s holds consumers on both protocols likewise.
// Before that, the per-IP connection limit closes the connection over it.
func TestQuotaProduceRate(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Combined: true,
		ExtraArgs: []string{"--quota.max-connections-per-ip=16"}})
	node := c.StorageNodes()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("MaxConnectionsPerIP", func(t *testing.T) {
		// The Kafka listener has no other client yet: 16 connections
		// are served, the 17th is closed at once, and one frees a slot.
		var conns []net.Conn
		defer func() {
			for _, nc := range conns {
				_ = nc.Close()
			}
		}()
		dial := func() net.Conn {
			nc, err := net.Dial("tcp", node.KafkaAddr)
			require.NoError(t, err)
			conns = append(conns, nc)
			return nc
		}
		for i := range quotaMaxConns {
			require.True(t, kafkaAnswers(t, dial()), "connection %d of %d", i+1, quotaMaxConns)
		}
		require.False(t, kafkaAnswers(t, dial()), "a connection over --quota.max-connections-per-ip is closed")
		require.NoError(t, conns[0].Close())
		require.Eventually(t, func() bool { return kafkaAnswers(t, dial()) }, 10*time.Second, 50*time.Millisecond)
	})

	cl := cluster.Client(t, c)
	kpCreateTopic(t, cl, "quota-kafka", 1, 1)
	kpCreateTopic(t, cl, "quota-grpc", 1, 1)

	admCl, err := kgo.NewClient(kgo.SeedBrokers(node.KafkaAddr))
	require.NoError(t, err)
	defer admCl.Close()
	str := func(s string) *string { return &s }
	var entries []kadm.AlterClientQuotaEntry
	for _, id := range []string{"quota-a-kafka", "quota-a-grpc"} {
		entries = append(entries, kadm.AlterClientQuotaEntry{
			Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: str(id)}},
			Ops:    []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: quotaRate}},
		})
	}
	for _, id := range []string{"quota-c-kafka", "quota-c-grpc"} {
		entries = append(entries, kadm.AlterClientQuotaEntry{
			Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: str(id)}},
			Ops:    []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: quotaRate}},
		})
	}
	altered, err := kadm.NewClient(admCl).AlterClientQuotas(ctx, entries)
	require.NoError(t, err)
	for _, a := range altered {
		require.NoError(t, a.Err, a.Entity)
	}
	admCl.Close()

	value := make([]byte, quotaValueSize)
	_, _ = rand.Read(value)
	start := time.Now()
	runCtx, stop := context.WithTimeout(ctx, quotaRun)
	defer stop()
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	kafkaProducer := func(id string, unpaced bool) (*ackMeter, *throttleHook) {
		m, hook := newAckMeter(start), &throttleHook{}
		// Uncompressed (quotas count the bytes on the wire), in batches
		// of the Java client's default batch.size.
		kc, err := kgo.NewClient(kgo.SeedBrokers(node.KafkaAddr), kgo.ClientID(id), kgo.DefaultProduceTopic("quota-kafka"),
			kgo.WithHooks(hook), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ProducerBatchMaxBytes(16<<10))
		require.NoError(t, err)
		run(func() {
			defer kc.Close()
			paced(runCtx, unpaced, func() {
				kc.Produce(runCtx, &kgo.Record{Value: value}, func(r *kgo.Record, err error) {
					if err == nil {
						m.add(len(r.Value))
					}
				})
			})
		})
		return m, hook
	}
	grpcProducer := func(id string, unpaced bool) (*ackMeter, *client.Producer) {
		m := newAckMeter(start)
		sc, err := client.New(client.Config{Bootstrap: c.Bootstrap(), ClientID: id})
		require.NoError(t, err)
		// Batches of 16 KiB, as the Kafka producers': by default a batch
		// grows to 1 MiB while its partition waits out a throttle, and one
		// such batch more or less is a tenth of the 10 MiB the measured
		// window should hold, which this check could not tell from the
		// quota's own error.
		p := sc.NewProducer(client.ProducerConfig{Linger: 5 * time.Millisecond, BufferBytes: 4 << 20,
			BatchBytes: 16 << 10, MaxBatchBytes: 16 << 10})
		run(func() {
			defer sc.Close()
			defer p.Close(context.Background())
			paced(runCtx, unpaced, func() {
				_ = p.Produce(runCtx, &client.Record{Topic: "quota-grpc", Value: value}, func(r client.Result) {
					if r.Err == nil {
						m.add(quotaValueSize)
					}
				})
			})
		})
		return m, p
	}
	// Consumers with a consumer_byte_rate read what the producers write,
	// from the start, alongside them.
	kafkaC, kafkaCHook := newAckMeter(start), &throttleHook{}
	run(func() {
		kc, err := kgo.NewClient(kgo.SeedBrokers(node.KafkaAddr), kgo.ClientID("quota-c-kafka"), kgo.ConsumeTopics("quota-kafka"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxPartitionBytes(64<<10), kgo.WithHooks(kafkaCHook))
		if !assert.NoError(t, err) {
			return
		}
		defer kc.Close()
		for runCtx.Err() == nil {
			kc.PollFetches(runCtx).EachRecord(func(r *kgo.Record) { kafkaC.add(len(r.Value)) })
		}
	})
	grpcC := newAckMeter(start)
	run(func() {
		sc, err := client.New(client.Config{Bootstrap: c.Bootstrap(), ClientID: "quota-c-grpc"})
		if !assert.NoError(t, err) {
			return
		}
		defer sc.Close()
		k := sc.NewConsumer(client.ConsumerConfig{Reset: client.ResetEarliest, PartitionMaxBytes: 64 << 10})
		defer k.Close()
		if !assert.NoError(t, k.AssignTopic(runCtx, "quota-grpc")) {
			return
		}
		for runCtx.Err() == nil {
			recs, _ := k.Poll(runCtx) // ends with the run
			for _, r := range recs {
				grpcC.add(len(r.Value))
			}
		}
	})
	kafkaA, kafkaAHook := kafkaProducer("quota-a-kafka", true)
	kafkaB, kafkaBHook := kafkaProducer("quota-b-kafka", false)
	grpcA, grpcAProducer := grpcProducer("quota-a-grpc", true)
	grpcB, grpcBProducer := grpcProducer("quota-b-grpc", false)
	wg.Wait()

	from, to := quotaRun-quotaMeasured, quotaRun
	rates := map[string]float64{
		"kafka A": kafkaA.rate(from, to), "kafka B": kafkaB.rate(from, to),
		"grpc A": grpcA.rate(from, to), "grpc B": grpcB.rate(from, to),
		"kafka C": kafkaC.rate(from, to), "grpc C": grpcC.rate(from, to),
	}
	aThrottles, aThrottled := grpcAProducer.Throttled()
	bThrottles, _ := grpcBProducer.Throttled()
	t.Logf("acknowledged bytes/s over the last %v: %v; throttles: kafka A %d (%v in all), kafka B %d, grpc A %d (%v in all), grpc B %d",
		quotaMeasured, rates, kafkaAHook.count.Load(), time.Duration(kafkaAHook.total.Load()), kafkaBHook.count.Load(),
		aThrottles, aThrottled, bThrottles)
	for _, name := range []string{"kafka A", "grpc A"} {
		require.InEpsilon(t, float64(quotaRate), rates[name], 0.10, "%s's rate converges to its quota", name)
	}
	// B offers 4 MiB/s; on a loaded machine it may reach less, but never
	// anything near the quota it does not have, and it is never throttled.
	for _, name := range []string{"kafka B", "grpc B"} {
		require.Greater(t, rates[name], 1.5*quotaRate, "%s has no quota and is not held to another's", name)
	}
	// The consumers have 5 MiB/s to read and are held to their quota.
	// Fetch responses are coarser than produce requests (up to 64 KiB a
	// partition) and the consumers start with the producers: the bound is
	// looser than for producers.
	for _, name := range []string{"kafka C", "grpc C"} {
		require.InEpsilon(t, float64(quotaRate), rates[name], 0.25, "%s's fetch rate is held to its quota", name)
	}
	require.Positive(t, kafkaCHook.count.Load(), "the franz-go consumer was told to back off")
	require.Positive(t, kafkaAHook.count.Load(), "franz-go was told to back off")
	require.Positive(t, aThrottles, "the SDK was told to back off")
	require.Zero(t, kafkaBHook.count.Load())
	require.Zero(t, bThrottles)
}

// kafkaAnswers reports whether the listener answers an ApiVersions request
// on nc (a connection closed on accept does not).
func kafkaAnswers(t *testing.T, nc net.Conn) bool {
	t.Helper()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	if _, err := nc.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)); err != nil {
		return false
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		return false
	}
	_, err := io.ReadFull(nc, make([]byte, binary.BigEndian.Uint32(size[:])))
	return err == nil
}
