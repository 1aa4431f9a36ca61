package storage

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
)

// The SIGKILL crash test re-runs this test binary as a child that appends
// batches as fast as it can from several goroutines, printing a line for
// every append acknowledged under sluice.fsync.before.ack. The parent kills
// it with SIGKILL after a random number of acknowledgements, reopens the
// log and checks: every acknowledged batch is there with its bytes, the log
// holds only whole, valid batches with dense offsets, offsets never repeat,
// and the epoch cache matches the batches. It repeats this on the same
// directory, so each round also recovers what the previous rounds left.

const (
	crashDirEnv   = "SLUICE_STORAGE_CRASH_DIR"
	crashEpochEnv = "SLUICE_STORAGE_CRASH_EPOCH"
	crashSeedEnv  = "SLUICE_STORAGE_CRASH_SEED"
)

func crashConfig(t testing.TB) Config {
	return testConfig(t, map[string]string{
		"segment.bytes": "65536", "index.interval.bytes": "512", "max.message.bytes": "16384",
		"sluice.fsync.before.ack": "true",
	})
}

// TestCrashChild is the child's body; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("runs only as the child of TestCrashSIGKILL")
	}
	epoch, err := strconv.Atoi(os.Getenv(crashEpochEnv))
	require.NoError(t, err)
	l, err := Open(dir, crashConfig(t), Options{CheckpointInterval: 5 * time.Millisecond, CheckpointBytes: 32 << 10})
	require.NoError(t, err)
	var out sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(epoch), uint64(w)))
			for seq := 0; ; seq++ {
				b := record.NewBuilder(record.Codec(rng.IntN(5)))
				for i := 0; i < 1+rng.IntN(40); i++ {
					v := fmt.Sprintf("epoch %d writer %d seq %d record %d %s", epoch, w, seq, i, make([]byte, rng.IntN(200)))
					_ = b.AppendKV(time.Now().UnixMilli(), []byte(strconv.Itoa(i)), []byte(v))
				}
				batch, _ := b.Build()
				crc := record.ComputeCRC(batch)
				if rng.IntN(4) == 0 {
					// Unacknowledged traffic: may be lost.
					if _, err := l.AppendAsLeader(batch, int32(epoch), record.FromClient); err != nil {
						panic(err)
					}
					continue
				}
				res, err := l.AppendSync(context.Background(), batch, int32(epoch), record.FromClient)
				if err != nil {
					panic(err)
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "ack %d %d %d %d\n", res.FirstOffset, res.LastOffset, crc, epoch)
				out.Unlock()
			}
		}()
	}
	wg.Wait()
}

type ack struct {
	first, last int64
	crc         uint32
	epoch       int32
}

func TestCrashSIGKILL(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (rerun with %s=%d)", seed, crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	iterations := 30
	deadline := time.Now().Add(40 * time.Second)
	var acked []ack
	for it := 1; it <= iterations && time.Now().Before(deadline); it++ {
		killAfter := 1 + rng.IntN(120)
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashEpochEnv+"="+strconv.Itoa(it))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		var round []ack
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var a ack
			if n, _ := fmt.Sscanf(sc.Text(), "ack %d %d %d %d", &a.first, &a.last, &a.crc, &a.epoch); n != 4 {
				continue
			}
			round = append(round, a)
			if len(round) == killAfter {
				require.NoError(t, cmd.Process.Kill()) // SIGKILL
			}
		}
		err = cmd.Wait()
		require.Error(t, err, "the child ends only by SIGKILL (round %d)", it)
		acked = append(acked, round...)
		verifyAfterCrash(t, dir, acked, it)
	}
	t.Logf("%d acknowledged batches survived every crash", len(acked))
}

func verifyAfterCrash(t *testing.T, dir string, acked []ack, round int) {
	t.Helper()
	l, err := Open(dir, crashConfig(t), Options{})
	require.NoError(t, err, "round %d: recovery failed", round)
	defer func() { require.NoError(t, l.Close()) }()
	end := l.LogEndOffset()

	// Walk every batch: valid, dense, epochs matching the cache.
	byFirst := map[int64]record.BatchHeader{}
	epochs := l.Epochs()
	next := l.LogStartOffset()
	for next < end {
		res, err := l.Read(next, end, 1<<20)
		require.NoError(t, err)
		buf := res.AppendTo(nil)
		res.Release()
		for it := record.Batches(buf); it.Next(); {
			h, err := record.CheckBatch(it.Bytes(), replicaChecks)
			require.NoError(t, err, "round %d: corrupt batch served at %d", round, next)
			require.Equal(t, next, h.BaseOffset, "round %d: offsets not dense", round)
			byFirst[h.BaseOffset] = h
			var want int32 = -1
			for _, e := range epochs {
				if e.StartOffset <= h.BaseOffset {
					want = e.Epoch
				}
			}
			require.Equal(t, want, h.PartitionLeaderEpoch, "round %d: epoch cache disagrees at %d", round, h.BaseOffset)
			next = h.NextOffset()
		}
	}
	require.Equal(t, end, next)
	for _, a := range acked {
		require.Less(t, a.last, end, "round %d: acknowledged batch %d-%d lost", round, a.first, a.last)
		h, ok := byFirst[a.first]
		require.True(t, ok, "round %d: acknowledged batch at %d is not a batch start", round, a.first)
		require.Equal(t, a.last, h.LastOffset())
		require.Equal(t, a.crc, h.CRC, "round %d: acknowledged batch at %d changed", round, a.first)
		require.Equal(t, a.epoch, h.PartitionLeaderEpoch)
	}
}
