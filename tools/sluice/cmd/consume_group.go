package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/assign"
)

// groupOptions are consume's flags for group mode.
type groupOptions struct {
	group, protocol, assignor string
	fromBeginning             bool
	readCommitted             bool
	maxMessages               int
	timeout                   time.Duration
	format                    string
}

// commitEvery is how often group mode commits what it printed while it
// runs (Kafka's auto.commit.interval.ms).
const commitEvery = 5 * time.Second

// groupConfig turns the flags into a group consumer configuration.
func (o groupOptions) config(topic string) (client.GroupConsumerConfig, error) {
	proto, err := client.ParseGroupProtocol(o.protocol)
	if err != nil {
		return client.GroupConsumerConfig{}, fmt.Errorf("--group-protocol: %w", err)
	}
	cfg := client.GroupConsumerConfig{GroupID: o.group, Topics: []string{topic}, Protocol: proto, Reset: client.ResetLatest,
		Consumer: client.ConsumerConfig{ReadCommitted: o.readCommitted}}
	if o.fromBeginning {
		// Kafka's console consumer: --from-beginning applies only where
		// the group has no committed offset.
		cfg.Reset = client.ResetEarliest
	}
	if o.assignor == "" {
		return cfg, nil
	}
	if proto == client.GroupProtocolConsumer {
		cfg.ServerAssignor = o.assignor
		return cfg, nil
	}
	for _, name := range strings.Split(o.assignor, ",") {
		a, ok := assign.ByName(strings.TrimSpace(name))
		if !ok {
			return cfg, fmt.Errorf("--assignor %q: want range, roundrobin, sticky or cooperative-sticky", name)
		}
		cfg.Assignors = append(cfg.Assignors, a)
	}
	return cfg, nil
}

// printedOffsets tracks, per owned partition, the offset after the last
// record printed: what group mode commits. Rebalance callbacks and the
// periodic commit read it from Poll's goroutine; the mutex covers the
// asynchronous commit's callback.
type printedOffsets struct {
	mu  sync.Mutex
	pos map[client.TopicPartition]int64
	// committed is what the last successful commit sent.
	committed map[client.TopicPartition]int64
}

func (p *printedOffsets) add(r *client.ConsumedRecord) {
	p.mu.Lock()
	p.pos[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
	p.mu.Unlock()
}

// pending returns the positions of tps not committed yet. A partition
// that printed nothing yet commits where reading starts (position gives
// it, -1 while unresolved), as Kafka commits the positions of all owned
// partitions: left uncommitted, a later run without --from-beginning would
// start it at the end and skip what was written in between.
func (p *printedOffsets) pending(tps []client.TopicPartition, position func(client.TopicPartition) int64) map[client.TopicPartition]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[client.TopicPartition]int64{}
	for _, tp := range tps {
		off, ok := p.pos[tp]
		if !ok {
			if off = position(tp); off < 0 {
				continue
			}
		}
		if c, ok := p.committed[tp]; !ok || c != off {
			out[tp] = off
		}
	}
	return out
}

// cut records that r was read but not printed (--max-messages ended the
// output): a partition with nothing printed resumes at r, not past it.
func (p *printedOffsets) cut(r *client.ConsumedRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
	if _, ok := p.pos[tp]; !ok {
		p.pos[tp] = r.Offset
	}
}

func (p *printedOffsets) done(offsets map[client.TopicPartition]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tp, off := range offsets {
		p.committed[tp] = off
	}
}

func (p *printedOffsets) forget(tps []client.TopicPartition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tp := range tps {
		delete(p.pos, tp)
		delete(p.committed, tp)
	}
}

func containsTP(tps []client.TopicPartition, tp client.TopicPartition) bool {
	for _, t := range tps {
		if t == tp {
			return true
		}
	}
	return false
}

// consumeGroup prints records of topic as a member of a consumer group. It
// commits exactly what it printed (not what Poll returned but was cut off by
// --max-messages): every few seconds, before partitions are revoked, and
// on the way out, however it ends.
func consumeGroup(cmd *cobra.Command, g *globals, c *client.Client, topic string, o groupOptions) (err error) {
	cfg, err := o.config(topic)
	if err != nil {
		return err
	}
	printed := &printedOffsets{pos: map[client.TopicPartition]int64{}, committed: map[client.TopicPartition]int64{}}
	warn := func(what string, err error) { fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %v\n", what, err) }
	var gc *client.GroupConsumer
	cfg.OnRevoked = func(ctx context.Context, tps []client.TopicPartition) {
		if offs := printed.pending(tps, gc.Position); len(offs) > 0 {
			if err := gc.CommitSync(ctx, offs); err != nil {
				warn("committing revoked partitions", err)
			} else {
				printed.done(offs)
			}
		}
		printed.forget(tps)
	}
	cfg.OnLost = func(_ context.Context, tps []client.TopicPartition) { printed.forget(tps) }
	gc, err = c.NewGroupConsumer(cfg)
	if err != nil {
		return err
	}
	defer func() {
		// Ctrl-C has canceled the command's context: the last commit and
		// the leave get a context of their own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), g.timeout)
		defer cancel()
		if offs := printed.pending(gc.Assignment(), gc.Position); len(offs) > 0 {
			if cerr := gc.CommitSync(ctx, offs); cerr != nil {
				err = errors.Join(err, fmt.Errorf("committing what was printed: %w", cerr))
			} else {
				printed.done(offs)
			}
		}
		if cerr := gc.Close(ctx); cerr != nil {
			warn("leaving the group", cerr)
		}
	}()
	ctx := cmd.Context()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	defer w.Flush()
	tmpl := o.format
	if tmpl == "" {
		tmpl = `%v\n`
	}
	n := 0
	lastCommit := time.Now()
	for o.maxMessages <= 0 || n < o.maxMessages {
		// Polls end every second so that commits go out while no records
		// arrive.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		recs, err := gc.Poll(pctx)
		cancel()
		var trunc *client.TruncationError
		switch {
		case errors.As(err, &trunc):
			warn("truncation", err)
			continue
		case err != nil && ctx.Err() == nil && pctx.Err() != nil:
			// This Poll's second is up.
		case err != nil && ctx.Err() != nil:
			w.Flush()
			if o.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && o.maxMessages > 0 {
				return fmt.Errorf("timed out after %v with %d of %d records", o.timeout, n, o.maxMessages)
			}
			return nil
		case err != nil:
			return err
		}
		before := n
		for _, r := range recs {
			if o.maxMessages > 0 && n >= o.maxMessages {
				break
			}
			writeRecord(w, tmpl, r)
			n++
		}
		// Printed means handed to stdout: flush before counting records as
		// printed (a full pipe makes the flush wait, not the commit run
		// ahead of the output).
		if err := w.Flush(); err != nil {
			return err
		}
		for _, r := range recs[:min(len(recs), n-before)] {
			printed.add(r)
		}
		for _, r := range recs[min(len(recs), n-before):] {
			printed.cut(r)
		}
		if time.Since(lastCommit) >= commitEvery {
			lastCommit = time.Now()
			if offs := printed.pending(gc.Assignment(), gc.Position); len(offs) > 0 {
				gc.CommitAsync(offs, func(err error) {
					if err != nil {
						warn("committing", err)
						return
					}
					printed.done(offs)
				})
			}
		}
	}
	return w.Flush()
}
