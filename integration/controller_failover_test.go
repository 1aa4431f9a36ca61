package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	metastorev1 "github.com/sluice-io/sluice/gen/go/sluice/metastore/v1"
	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/devcluster"
)

// activeController returns the process of the active controller.
func activeController(ctx context.Context, c *devcluster.Cluster, cl *client.Client) (*devcluster.Process, error) {
	resp, err := cl.DescribeCluster(ctx)
	if err != nil {
		return nil, err
	}
	if p := nodeByID(c, resp.GetControllerId()); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("no active controller (id %d)", resp.GetControllerId())
}

// awaitActiveController waits for an active controller other than not (nil
// for any). A controller passes its health check before it has won the
// election, and one just restarted may answer before it has learnt who won,
// so a test that is about to act on the active controller waits for one.
func awaitActiveController(t *testing.T, ctx context.Context, c *devcluster.Cluster, cl *client.Client, not *devcluster.Process) *devcluster.Process {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := activeController(ctx, c, cl)
		if err == nil && p == not {
			err = fmt.Errorf("controller %d is still reported active", p.NodeID)
		}
		if err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("no active controller after 30 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SIGKILL the active controller ten times in a row while topics are being
// created: a new controller is active within 5 s each time, no acknowledged
// topic creation is lost, and the etcd history shows that no two controllers
// ever wrote at once (controller epochs never go backwards).
func TestActiveControllerKilledTenTimes(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 3, StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Topic creation runs throughout, through the SDK (which follows the
	// active controller and retries while there is none).
	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("t-%04d", i)
			cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := cl.CreateTopic(cctx, name, 1, 1, nil)
			ccancel()
			// A retried create whose first attempt landed reports that the
			// topic exists: it was created all the same.
			if err == nil || errs.Is(err, errs.TopicAlreadyExists) {
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		}
	})

	var failovers []time.Duration
	for round := range 10 {
		old := awaitActiveController(t, ctx, c, cl, nil)
		require.NoError(t, old.Kill())
		start := time.Now()
		var elapsed time.Duration
		require.Eventually(t, func() bool {
			p, err := activeController(ctx, c, cl)
			if err != nil || p == old {
				return false
			}
			elapsed = time.Since(start)
			return true
		}, 15*time.Second, 20*time.Millisecond, "round %d: no new active controller", round)
		failovers = append(failovers, elapsed)
		t.Logf("round %d: killed controller %d, node %d active after %v", round, old.NodeID, mustActive(ctx, c, cl).NodeID, elapsed.Round(time.Millisecond))
		require.NoError(t, old.Start())
		require.NoError(t, old.WaitHealthy(ctx, 60*time.Second))
	}
	close(stop)
	wg.Wait()
	t.Logf("controller failover over %d kills: p50 %v, max %v", len(failovers), percentile(failovers, 0.5).Round(time.Millisecond),
		percentile(failovers, 1).Round(time.Millisecond))
	for i, d := range failovers {
		require.Less(t, d, 5*time.Second, "failover %d took %v", i, d)
	}

	list, err := cl.ListTopics(ctx, false)
	require.NoError(t, err)
	have := map[string]bool{}
	for _, l := range list.GetTopics() {
		have[l.GetName()] = true
	}
	require.Greater(t, len(acked), 20, "the workload made progress")
	for _, name := range acked {
		require.True(t, have[name], "acknowledged topic %s is missing", name)
	}
	t.Logf("%d topic creations acknowledged, all present", len(acked))

	checkEpochHistory(t, ctx, c)
}

func mustActive(ctx context.Context, c *devcluster.Cluster, cl *client.Client) *devcluster.Process {
	p, _ := activeController(ctx, c, cl)
	if p == nil {
		return &devcluster.Process{NodeID: -1}
	}
	return p
}

// checkEpochHistory reads every write to topic and partition records from
// etcd's history and checks that the epoch of the controller that made it
// never decreases: once a controller with a higher epoch has written, no
// write from an older one lands.
func checkEpochHistory(t *testing.T, ctx context.Context, c *devcluster.Cluster) {
	t.Helper()
	var endpoints []string
	for _, p := range c.Controllers() {
		endpoints = append(endpoints, p.EtcdClientAddr)
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer ec.Close()
	head, err := ec.Get(ctx, "/sluice/cluster/id")
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := ec.Watch(wctx, "/sluice/", clientv3.WithPrefix(), clientv3.WithRev(1))
	var last, writes int64
	epochs := map[int64]bool{}
	var seen int64
	for resp := range wch {
		require.NoError(t, resp.Err())
		for _, ev := range resp.Events {
			seen = max(seen, ev.Kv.ModRevision)
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			key := string(ev.Kv.Key)
			var epoch int64
			switch {
			case strings.HasPrefix(key, "/sluice/topics/"):
				r := &metastorev1.TopicRecord{}
				require.NoError(t, proto.Unmarshal(ev.Kv.Value, r))
				epoch = r.GetControllerEpoch()
			case strings.HasPrefix(key, "/sluice/partitions/"):
				r := &metastorev1.PartitionRecord{}
				require.NoError(t, proto.Unmarshal(ev.Kv.Value, r))
				epoch = r.GetControllerEpoch()
			default:
				continue
			}
			require.GreaterOrEqual(t, epoch, last, "write to %s at revision %d by controller epoch %d after epoch %d had written",
				key, ev.Kv.ModRevision, epoch, last)
			last = epoch
			writes++
			epochs[epoch] = true
		}
		if seen >= head.Header.GetRevision() {
			break
		}
	}
	t.Logf("etcd history: %d controller writes by %d controller epochs, never out of order", writes, len(epochs))
	require.Greater(t, len(epochs), 5)
}

// --- Model-checked metadata operations --------------------------------------

type opKind int

const (
	opCreate opKind = iota
	opDelete
	opGrow
	opDescribe
)

type metaInput struct {
	kind  opKind
	topic string
	n     int32 // partitions to create, or the new total
}

type metaOutput struct {
	result string // ok, exists, unknown, invalid, value, indeterminate
	n      int32  // partitions seen by describe
}

// metaModel is a topic name's partition count (0: absent) under create,
// delete, grow and describe. An operation with an indeterminate outcome (a
// timeout, a lost connection) may or may not have taken effect.
var metaModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(metaInput).topic
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []any { return []any{int32(0)} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int32), input.(metaInput), output.(metaOutput)
		var next int32
		var want string
		switch in.kind {
		case opCreate:
			want, next = "ok", in.n
			if s != 0 {
				want, next = "exists", s
			}
		case opDelete:
			want, next = "ok", 0
			if s == 0 {
				want = "unknown"
			}
		case opGrow:
			switch {
			case s == 0:
				want, next = "unknown", s
			case in.n <= s:
				want, next = "invalid", s
			default:
				want, next = "ok", in.n
			}
		case opDescribe:
			if out.result == "value" && out.n == s {
				return []any{s}
			}
			if out.result == "unknown" && s == 0 {
				return []any{s}
			}
			return nil
		}
		if out.result == "indeterminate" {
			return []any{s, next}
		}
		if out.result == want {
			return []any{next}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(metaInput), output.(metaOutput)
		return fmt.Sprintf("%v(%s,%d) -> %s %d", in.kind, in.topic, in.n, out.result, out.n)
	},
}

// A history of concurrent topic operations sent to random controllers while
// the active one is killed is linearizable against a simple model. Writes
// are sent once, without retries, so every outcome is either known or
// marked indeterminate.
func TestMetadataOperationsLinearizableUnderFailover(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 3, StorageNodes: 1})
	cl := cluster.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := wire.NewPool(wire.ClientOptions{})
	defer pool.Close()
	var addrs []string
	for _, p := range c.Controllers() {
		addrs = append(addrs, p.Addr)
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var mu sync.Mutex
	var history []porcupine.Operation
	const far = int64(1) << 62
	runUntil := time.Now().Add(25 * time.Second)
	var wg sync.WaitGroup
	for clientID := range 4 {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(clientID)))
		wg.Go(func() {
			for time.Now().Before(runUntil) {
				in := metaInput{kind: opKind(rng.IntN(4)), topic: fmt.Sprintf("m-%d", rng.IntN(3)), n: int32(1 + rng.IntN(4))}
				conn, err := pool.Get(addrs[rng.IntN(len(addrs))])
				require.NoError(t, err)
				cc := controllerv1.NewControllerServiceClient(conn)
				call := time.Now().UnixNano()
				out, keep := runMetaOp(ctx, cc, in)
				ret := time.Now().UnixNano()
				if !keep {
					continue
				}
				if out.result == "indeterminate" {
					ret = far // it may take effect at any later time
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: clientID, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	// Kill the active controller three times during the run.
	for range 3 {
		time.Sleep(5 * time.Second)
		p := awaitActiveController(t, ctx, c, cl, nil)
		require.NoError(t, p.Kill())
		require.NoError(t, p.Start())
		require.NoError(t, p.WaitHealthy(ctx, 60*time.Second))
	}
	wg.Wait()

	counts := map[string]int{}
	for _, op := range history {
		counts[op.Output.(metaOutput).result]++
	}
	t.Logf("%d operations checked: %v", len(history), counts)
	require.Greater(t, counts["ok"], 10)
	res := porcupine.CheckOperationsTimeout(metaModel.ToModel(), history, time.Minute)
	require.Equal(t, porcupine.Ok, res, "history is not linearizable")
}

// runMetaOp sends one operation once. keep is false when the operation
// certainly did not take effect and has no result to check (the controller
// was a standby, or no connection was made).
func runMetaOp(ctx context.Context, cc controllerv1.ControllerServiceClient, in metaInput) (metaOutput, bool) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var item interface{ GetCode() errs.Code }
	var err error
	switch in.kind {
	case opCreate:
		n, rf := in.n, int32(1)
		var resp *controllerv1.CreateTopicsResponse
		resp, err = cc.CreateTopics(cctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: in.topic, NumPartitions: &n, ReplicationFactor: &rf}}})
		if err == nil {
			item = resp.GetResults()[0].GetError()
		}
	case opDelete:
		var resp *controllerv1.DeleteTopicsResponse
		resp, err = cc.DeleteTopics(cctx, &controllerv1.DeleteTopicsRequest{Names: []string{in.topic}})
		if err == nil {
			item = resp.GetResults()[0].GetError()
		}
	case opGrow:
		var resp *controllerv1.CreatePartitionsResponse
		resp, err = cc.CreatePartitions(cctx, &controllerv1.CreatePartitionsRequest{Topics: []*controllerv1.PartitionIncrease{{Topic: in.topic, TotalCount: in.n}}})
		if err == nil {
			item = resp.GetResults()[0].GetError()
		}
	case opDescribe:
		var resp *controllerv1.DescribeTopicsResponse
		resp, err = cc.DescribeTopics(cctx, &controllerv1.DescribeTopicsRequest{Names: []string{in.topic}})
		if err != nil {
			return metaOutput{}, false // a read that failed tells nothing
		}
		d := resp.GetTopics()[0]
		if d.GetError() != nil {
			return metaOutput{result: "unknown"}, true
		}
		return metaOutput{result: "value", n: int32(len(d.GetPartitions()))}, true
	}
	if err != nil {
		switch errs.CodeOf(err) {
		case errs.NotController, errs.NodeNotReady:
			return metaOutput{}, false // refused before any write
		}
		return metaOutput{result: "indeterminate"}, true
	}
	code := errs.None
	if item != nil {
		code = item.GetCode()
	}
	switch code {
	case errs.None:
		return metaOutput{result: "ok"}, true
	case errs.TopicAlreadyExists:
		return metaOutput{result: "exists"}, true
	case errs.UnknownTopicOrPartition:
		return metaOutput{result: "unknown"}, true
	case errs.InvalidPartitions:
		return metaOutput{result: "invalid"}, true
	case errs.NotController:
		// The write's guard failed: this controller was deposed before it
		// could write, so nothing happened.
		return metaOutput{}, false
	default:
		return metaOutput{result: "indeterminate"}, true
	}
}
