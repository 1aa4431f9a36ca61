package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/testutil"
	"github.com/sluice-io/sluice/services/sluiced/app"
)

// syncBuffer is a log sink that tests can read while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log lines whose msg is msg.
func (b *syncBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// serverConfig is the configuration of a one-process cluster (every role)
// on free loopback ports, extra flags given after the defaults (the last
// of a flag wins); it returns the gRPC address too.
func serverConfig(t *testing.T, extra ...string) (app.Config, string) {
	t.Helper()
	ports := testutil.FreePorts(t, 3)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var cfg app.Config
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.NoError(t, fs.Parse(append([]string{
		"--roles=all", "--node-id=1", "--data-dir=" + t.TempDir(), "--listen=" + addr, "--http-listen=",
		"--controller.etcd.name=c1",
		fmt.Sprintf("--controller.etcd.client-listen=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--controller.etcd.peer-listen=127.0.0.1:%d", ports[2]),
		fmt.Sprintf("--controller.etcd.initial-cluster=c1=http://127.0.0.1:%d", ports[2]),
	}, extra...)))
	return cfg, addr
}

// startServer runs a one-process cluster (every role) in this test process.
func startServer(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	cfg, addr := serverConfig(t, "--log.level=debug", "--log.format=json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, logs) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return addr
}

// A producer that closes after every record was acknowledged ends its
// produce streams as finished calls: the node logs (and counts) them with
// code OK, not Canceled.
func TestClosedProduceStreamEndsOK(t *testing.T) {
	logs := &syncBuffer{}
	addr := startServer(t, logs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Config{Bootstrap: []string{addr}})
	require.NoError(t, err)
	defer cl.Close()
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		_, err := cl.CreateTopic(ctx, "closing", 1, 1, nil)
		return err
	})

	p := cl.NewProducer(client.ProducerConfig{Acks: client.AcksAll})
	for i := range 10 {
		_, err := p.ProduceSync(ctx, &client.Record{Topic: "closing", Partition: 0, Value: fmt.Appendf(nil, "r%d", i)})
		require.NoError(t, err)
	}
	require.NoError(t, p.Close(ctx))

	var ends []map[string]any
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		ends = nil
		for _, l := range logs.lines("finished call") {
			if l["grpc.method"] == "ProduceStream" {
				ends = append(ends, l)
			}
		}
		if len(ends) == 0 {
			return fmt.Errorf("no ProduceStream has finished yet")
		}
		return nil
	})
	require.Len(t, ends, 1, "one stream to the one node")
	require.Equal(t, "OK", ends[0]["grpc.code"], "%v", ends[0])
}
