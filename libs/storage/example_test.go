package storage_test

import (
	"context"
	"fmt"
	"os"

	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/storage"
)

// A leader appends a producer's batch durably, a consumer fetches it as
// page-cache chunks bounded by the high watermark, and a follower asks where
// an epoch ended.
func Example() {
	dir, err := os.MkdirTemp("", "sluice-log-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	cfg, err := storage.ParseConfig(map[string]string{
		"segment.bytes":           "1048576",
		"retention.ms":            "86400000",
		"sluice.fsync.before.ack": "true",
	})
	if err != nil {
		panic(err)
	}
	l, err := storage.Open(dir, cfg, storage.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	b := record.NewBuilder(record.CodecLZ4)
	for i := 0; i < 3; i++ {
		_ = b.AppendKV(1_700_000_000_000+int64(i), []byte(fmt.Sprintf("order-%d", i)), []byte("placed"))
	}
	batch, err := b.Build()
	if err != nil {
		panic(err)
	}
	const leaderEpoch = 5
	res, err := l.AppendSync(context.Background(), batch, leaderEpoch, record.FromClient)
	if err != nil {
		panic(err)
	}
	fmt.Println("appended offsets", res.FirstOffset, "to", res.LastOffset, "durable:", l.DurableOffset() > res.LastOffset)

	highWatermark := l.LogEndOffset()
	rr, err := l.Read(0, highWatermark, 1<<20)
	if err != nil {
		panic(err)
	}
	var it record.Iterator
	for _, c := range rr.Chunks { // a fetch would stream c.Data as is
		it.Reset(c.Data)
		for it.Next() {
			fmt.Printf("%d %s %s\n", it.Record().Offset, it.Record().Key, it.Record().Value)
		}
	}
	rr.Release()

	epoch, end := l.EndOffsetForEpoch(leaderEpoch)
	fmt.Println("epoch", epoch, "ends at", end)
	// Output:
	// appended offsets 0 to 2 durable: true
	// 0 order-0 placed
	// 1 order-1 placed
	// 2 order-2 placed
	// epoch 5 ends at 3
}
