package main

import (
	"context"
	"fmt"
	"strconv"
)

// The defaults block measures what a user gets from `sluice perf produce`
// without tuning flags (acks=all, idempotent, 64 KiB batches, linger 5 ms,
// the topic's default fsync before ack), and those defaults with only acks=1
// and no fsync, so that each stands beside the Sluice block's tuned figure
// of the same durability. It has a sluiced of its own and rotates with the
// other blocks, so both sides see the same drift over a round.

var defaultsFigures = []string{"defaults.produce_1k_acks1", "defaults.produce_100b_acks1", "defaults.produce_1k", "defaults.produce_100b"}

func (h *harness) defaultsBlock(ctx context.Context, round int) {
	srv, addr, err := h.startSluiced(ctx, fmt.Sprintf("sluiced-defaults-r%d", round))
	if err != nil {
		h.failAll(round, defaultsFigures, err)
		return
	}
	defer h.stopSluiced(srv)
	c := h.cfg
	parts := strconv.Itoa(c.partitions)
	produce := func(topic string, records int64, size int, tuning ...string) []string {
		args := []string{"produce", "--topic", topic, "--partitions", parts, "--replication-factor", "1",
			"--num-records", strconv.FormatInt(records, 10), "--record-size", strconv.Itoa(size)}
		return h.perfArgv(addr, append(args, tuning...)...)
	}
	acks1 := []string{"--acks", "1", "--topic-config", "sluice.fsync.before.ack=false"}
	n1k, n100 := c.recordsDefaults1K, c.recordsDefaults100
	h.measure(ctx, round, measurement{figure: "defaults.produce_1k_acks1", sluicePerf: true, server: srv, cpu: true, bytes: n1k * 1024,
		argv: produce("d1k-acks1", n1k, 1024, acks1...)})
	h.measure(ctx, round, measurement{figure: "defaults.produce_100b_acks1", sluicePerf: true, server: srv, cpu: true, bytes: n100 * 100,
		argv: produce("d100-acks1", n100, 100, acks1...)})
	h.measure(ctx, round, measurement{figure: "defaults.produce_1k", sluicePerf: true, server: srv, cpu: true, bytes: n1k * 1024,
		argv: produce("d1k", n1k, 1024)})
	h.measure(ctx, round, measurement{figure: "defaults.produce_100b", sluicePerf: true, server: srv, cpu: true, bytes: n100 * 100,
		argv: produce("d100", n100, 100)})
}
