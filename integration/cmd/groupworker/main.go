// Command groupworker is a consumer-group member for the fault tests: it
// consumes a topic with the SDK's GroupConsumer, "processes" every record by
// appending a JSON line to a file, commits what it processed after every
// poll and before giving partitions up, and logs every assignment change.
// The test reads the files afterwards and checks the group's guarantees.
//
// Each line is written with one write call and no buffering, so SIGKILL loses
// at most the line being written. Lines (t and t0 are Unix nanoseconds, gen
// is the classic generation or the consumer protocol's member epoch):
//
//	{"kind":"record","t":..,"member":..,"gen":..,"topic":..,"partition":..,"offset":..,"key":..}
//	{"kind":"commit","t":..,"t0":..,"member":..,"gen":..,"partition":..,"offset":..,"ok":true}  (or "err")
//	{"kind":"assigned"|"revoked"|"lost","t":..,"member":..,"gen":..,"partitions":[..]}
//	{"kind":"owned","t":..,"member":..,"gen":..,"partitions":[..]}  after a Poll that changed them
//	{"kind":"start"|"exit"|"error","t":..,"err":..}
//
// It exits cleanly on SIGTERM: Close revokes (committing) and leaves.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "groupworker:", err)
		os.Exit(1)
	}
}

// line is one entry of the output file; fields a kind does not use stay
// empty.
type line struct {
	Kind       string  `json:"kind"`
	T          int64   `json:"t"`
	T0         int64   `json:"t0,omitempty"`
	Member     string  `json:"member,omitempty"`
	Gen        int32   `json:"gen"`
	Topic      string  `json:"topic,omitempty"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	Key        string  `json:"key,omitempty"`
	OK         bool    `json:"ok,omitempty"`
	Err        string  `json:"err,omitempty"`
	Partitions []int32 `json:"partitions,omitempty"`
}

// journal appends lines to the output file, one write call per line.
type journal struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

func (j *journal) write(l line) {
	if l.T == 0 {
		l.T = time.Now().UnixNano()
	}
	b, err := json.Marshal(l)
	if err != nil {
		panic(err) // the struct always marshals
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(b); err != nil && j.err == nil {
		j.err = fmt.Errorf("writing %s: %w", j.f.Name(), err)
	}
}

// worker holds what the member processed and committed per partition of
// the topic.
type worker struct {
	g     *client.GroupConsumer
	out   *journal
	topic string
	// next is the offset after the last processed record; committed is
	// the last offset committed successfully.
	next, committed map[int32]int64
	lastGen         int32
	lastOwned       []int32
}

func run() error {
	bootstrap := flag.String("bootstrap", "", "comma-separated addresses of Sluice nodes")
	group := flag.String("group", "", "consumer group id")
	topic := flag.String("topic", "", "topic to consume")
	protocol := flag.String("protocol", "classic", "group protocol: classic or consumer")
	assignor := flag.String("assignor", "cooperative-sticky", "classic assignor: range, roundrobin, sticky or cooperative-sticky")
	outPath := flag.String("out", "", "file the lines are appended to")
	session := flag.Duration("session-timeout", 6*time.Second, "classic session timeout")
	heartbeat := flag.Duration("heartbeat-interval", time.Second, "classic heartbeat interval")
	flag.Parse()
	if *bootstrap == "" || *group == "" || *topic == "" || *outPath == "" {
		return errors.New("--bootstrap, --group, --topic and --out are required")
	}
	proto, err := client.ParseGroupProtocol(*protocol)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening output: %w", err)
	}
	defer f.Close()
	out := &journal{f: f}
	out.write(line{Kind: "start", Gen: -1})

	cl, err := client.New(client.Config{Bootstrap: strings.Split(*bootstrap, ",")})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	defer cl.Close()
	w := &worker{out: out, topic: *topic, next: map[int32]int64{}, committed: map[int32]int64{}, lastGen: -1}
	cfg := client.GroupConsumerConfig{
		GroupID: *group, Topics: []string{*topic}, Protocol: proto, Reset: client.ResetEarliest,
		OnAssigned: w.onAssigned, OnRevoked: w.onRevoked, OnLost: w.onLost,
	}
	if proto == client.GroupProtocolClassic {
		a, ok := assign.ByName(*assignor)
		if !ok {
			return fmt.Errorf("unknown assignor %q", *assignor)
		}
		cfg.Assignors = []assign.Assignor{a}
		cfg.SessionTimeout, cfg.HeartbeatInterval = *session, *heartbeat
	}
	g, err := cl.NewGroupConsumer(cfg)
	if err != nil {
		return err
	}
	w.g = g

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w.loop(ctx)

	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = g.Close(cctx)
	l := line{Kind: "exit", Gen: -1}
	if err != nil {
		l.Err = err.Error()
	}
	out.write(l)
	return out.err
}

// loop polls until ctx ends. A Poll is bounded so that a commit that failed
// is retried even when no more records come.
func (w *worker) loop(ctx context.Context) {
	var failures int
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		recs, err := w.g.Poll(pctx)
		cancel()
		w.noteOwned()
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
		default:
			w.out.write(line{Kind: "error", Gen: w.g.Generation(), Member: w.g.MemberID(), Err: err.Error()})
			// Back off so a persistent error does not spin; the wait ends
			// early on SIGTERM.
			failures++
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, time.Second)):
			}
			continue
		}
		member, gen := w.g.MemberID(), w.g.Generation()
		for _, r := range recs {
			w.out.write(line{Kind: "record", Member: member, Gen: gen, Topic: r.Topic, Partition: r.Partition,
				Offset: r.Offset, Key: string(r.Key)})
			w.next[r.Partition] = r.Offset + 1
		}
		w.commit(w.pending(nil))
	}
}

// noteOwned logs the member's assignment and generation when either changed
// since the last Poll.
func (w *worker) noteOwned() {
	gen := w.g.Generation()
	var owned []int32
	for _, tp := range w.g.Assignment() {
		owned = append(owned, tp.Partition)
	}
	if gen == w.lastGen && slices.Equal(owned, w.lastOwned) {
		return
	}
	w.lastGen, w.lastOwned = gen, owned
	w.out.write(line{Kind: "owned", Member: w.g.MemberID(), Gen: gen, Partitions: owned})
}

// pending returns the processed offsets not committed yet, of only (all
// partitions when nil).
func (w *worker) pending(only []int32) map[int32]int64 {
	out := map[int32]int64{}
	for p, next := range w.next {
		if only != nil && !slices.Contains(only, p) {
			continue
		}
		if c, ok := w.committed[p]; !ok || next > c {
			out[p] = next
		}
	}
	return out
}

// commit commits offsets with CommitSync and logs one line per partition.
// Its context is not the signal's: SIGTERM must not cut a commit short.
func (w *worker) commit(offsets map[int32]int64) {
	if len(offsets) == 0 {
		return
	}
	req := make(map[client.TopicPartition]int64, len(offsets))
	for p, o := range offsets {
		req[client.TopicPartition{Topic: w.topic, Partition: p}] = o
	}
	member, gen := w.g.MemberID(), w.g.Generation()
	t0 := time.Now().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := w.g.CommitSync(ctx, req)
	cancel()
	for p, o := range offsets {
		l := line{Kind: "commit", T0: t0, Member: member, Gen: gen, Topic: w.topic, Partition: p, Offset: o}
		if err != nil {
			l.Err = err.Error()
		} else {
			l.OK = true
			w.committed[p] = o
		}
		w.out.write(l)
	}
}

func partitionsOf(tps []client.TopicPartition) []int32 {
	out := make([]int32, 0, len(tps))
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	slices.Sort(out)
	return out
}

func (w *worker) onAssigned(_ context.Context, tps []client.TopicPartition) {
	w.out.write(line{Kind: "assigned", Member: w.g.MemberID(), Gen: w.g.Generation(), Partitions: partitionsOf(tps)})
}

// onRevoked commits what was processed of the partitions given up, then
// forgets them: the next owner starts where this commit ends.
func (w *worker) onRevoked(_ context.Context, tps []client.TopicPartition) {
	parts := partitionsOf(tps)
	w.commit(w.pending(parts))
	w.out.write(line{Kind: "revoked", Member: w.g.MemberID(), Gen: w.g.Generation(), Partitions: parts})
	w.forget(parts)
}

// onLost forgets partitions without committing: they may belong to
// another member already.
func (w *worker) onLost(_ context.Context, tps []client.TopicPartition) {
	parts := partitionsOf(tps)
	w.out.write(line{Kind: "lost", Member: w.g.MemberID(), Gen: w.g.Generation(), Partitions: parts})
	w.forget(parts)
}

func (w *worker) forget(parts []int32) {
	for _, p := range parts {
		delete(w.next, p)
		delete(w.committed, p)
	}
}
