// Package verify runs a checked workload against a Sluice cluster: plain,
// idempotent and transactional producers, assigned consumers of both
// isolation levels and group consumers of both protocols, every operation
// recorded with its invocation and completion times and its outcome into a
// history (package check). After the workload it stops the producers, waits
// for the cluster to answer, reads every partition from offset 0 to its end
// with both isolation levels, checks the history, and writes a report:
//
//   - summary.txt: the verdict on the first line ("VALID" or
//     "INVALID: N anomalies (kinds)"), then counts, then examples;
//   - result.json: the Report, the checker's result included;
//   - history.json: the history, which check.ReadHistory reads back
//     (`sluice verify --check-only history.json` re-checks it);
//   - timeline.svg: throughput (ok/fail/info per second), latency (p50/p99
//     per second) and the faults injected, against time.
//
// The nemesis (package nemesis) injects faults meanwhile and hands them to
// Run through Config.Faults.
package verify
