package main

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/libs/verify"
	"github.com/sluice-io/sluice/libs/verify/check"
	"github.com/sluice-io/sluice/libs/verify/nemesis"
)

// chaosCase is one run: a topology, a workload and a fault schedule, all
// fixed by the case (PR tier, planted bugs) or drawn from the seed (soak).
type chaosCase struct {
	Name     string
	Seed     int64
	Topology string
	Workload string
	// Duration is how long the workload runs (the quiet phase and final
	// reads come after).
	Duration time.Duration
	// Steps is the fault schedule; nil draws one with nemesis.Plan, and an
	// empty list means no faults.
	Steps []nemesis.Step
	// Plan shapes a drawn schedule (Duration set by the runner).
	Plan nemesis.PlanOptions
	// Planted names the bug this case is built to catch; Expect lists the
	// anomaly kinds that count as catching it.
	Planted string
	Expect  []check.Kind
	// Acks and TopicConfigs, when set, are the unsafe settings of a
	// negative control (verify.Config.Acks and .TopicConfigs): settings
	// that allow acknowledged records to be lost, run on the normal binary,
	// which must make the checker report one of Expect. --control runs the
	// case without them.
	Acks         string
	TopicConfigs map[string]string
	// ServerArgs are added to every process's flags (after serverArgs).
	ServerArgs []string
	// Why says what the case exercises.
	Why string
}

// unsafe describes the unsafe settings of a negative control ("" for
// other cases).
func (c chaosCase) unsafe() string {
	var parts []string
	if c.Acks != "" && c.Acks != "all" && c.Acks != "-1" {
		parts = append(parts, "acks="+c.Acks)
	}
	for _, k := range slices.Sorted(maps.Keys(c.TopicConfigs)) {
		parts = append(parts, k+"="+c.TopicConfigs[k])
	}
	return strings.Join(parts, " ")
}

// safe returns the case as the control of a negative control: acks=all and
// the workload's own topic configs (min.insync.replicas=2, unclean election
// off), same cluster flags and faults, nothing expected.
func (c chaosCase) safe() chaosCase {
	c.Name += "-control"
	c.Acks, c.TopicConfigs, c.Expect = "", nil, nil
	return c
}

// The workloads: mixes of producers and consumers for verify.Run.
var workloads = []string{"default", "txn", "groups", "produce", "produce-wide", "produce-plain"}

func workloadConfig(name string) (verify.Config, error) {
	switch name {
	case "default":
		return verify.Config{}, nil
	case "txn":
		// Transactions with read_committed readers watching them while
		// they are open.
		return verify.Config{Producers: verify.Producers{Idempotent: 1, Transactional: 3}, Rate: 1000,
			Consumers: verify.Consumers{AssignCommitted: 2, AssignUncommitted: 1, ClassicGroup: 1}}, nil
	case "groups":
		return verify.Config{Producers: verify.Producers{Idempotent: 2},
			Consumers: verify.Consumers{AssignCommitted: 1, ClassicGroup: 3, ConsumerGroup: 3}}, nil
	case "produce":
		// acks=all producers only, for the replication path, at a rate that
		// keeps requests in flight when a leader dies.
		return verify.Config{Producers: verify.Producers{Plain: 1, Idempotent: 3},
			Consumers: verify.Consumers{AssignCommitted: 1, AssignUncommitted: 1}, Rate: 2500}, nil
	case "produce-plain":
		// Plain producers only (idempotence off), so Config.Acks reaches
		// every producer: the workload of the negative controls.
		return verify.Config{Producers: verify.Producers{Plain: 4}, Partitions: 8,
			Consumers: verify.Consumers{AssignCommitted: 1, AssignUncommitted: 1}, Rate: 2500}, nil
	case "produce-wide":
		// The same over 24 partitions: more partitions where a race of a
		// fault with replication can go wrong.
		return verify.Config{Producers: verify.Producers{Plain: 1, Idempotent: 3}, Partitions: 8,
			Consumers: verify.Consumers{AssignCommitted: 1, AssignUncommitted: 1}, Rate: 2500}, nil
	}
	return verify.Config{}, fmt.Errorf("unknown workload %q (known: default, txn, groups, produce, produce-wide, produce-plain)", name)
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func step(at float64, k nemesis.Kind, r nemesis.Role, d float64, detail string) nemesis.Step {
	return nemesis.Step{At: sec(at), Kind: k, Target: r, Duration: sec(d), Detail: detail}
}

// sessionTimeout is the controller session timeout the cluster runs with
// (serverArgs); pauses and partitions outlast it.
const sessionTimeout = 3 * time.Second

// prCases is the PR tier: every kind of process fault the platform must
// survive, each on the shortest run that still sees it under load. The
// whole tier is meant to stay within 6 minutes on 2 cores.
var prCases = []chaosCase{
	{Name: "leader-kills", Seed: 101, Topology: "dev3", Workload: "default", Duration: sec(24),
		Why: "SIGKILL of two storage leaders under acks=all load, then a partition moved to another leader",
		Steps: []nemesis.Step{
			step(5, nemesis.Kill, nemesis.StorageLeader, 3, ""),
			step(12, nemesis.Kill, nemesis.StorageLeader, 3, ""),
			step(19, nemesis.Move, nemesis.StorageLeader, 0, ""),
		}},
	{Name: "controller-and-pause", Seed: 102, Topology: "dev3", Workload: "txn", Duration: sec(24),
		Why: "SIGKILL of the active controller; a transaction coordinator's requests to other processes (transaction markers, " +
			"ISR changes, producer id blocks) each sent twice; a storage leader paused past the session timeout (comes back a zombie); " +
			"then a follower's replication fetches from its leader slowed by 200-300 ms each way",
		Steps: []nemesis.Step{
			step(5, nemesis.Kill, nemesis.Controller, 3, ""),
			step(8.5, nemesis.Duplicate, nemesis.TxnCoordinator, 3, "to=any dup=1"),
			step(12, nemesis.Pause, nemesis.StorageLeader, 5, ""),
			step(18, nemesis.Delay, nemesis.StorageFollower, 4, "to=storage-leader delay=200ms jitter=100ms"),
		}},
	{Name: "partition", Seed: 103, Topology: "dev3", Workload: "default", Duration: sec(24),
		Why: "a storage leader cut off from every other process, then the active controller from some of them",
		Steps: []nemesis.Step{
			step(5, nemesis.Partition, nemesis.StorageLeader, 6, "isolate"),
			step(15, nemesis.Partition, nemesis.Controller, 5, "subset"),
		}},
	{Name: "crash-unsynced", Seed: 104, Topology: "dev3", Workload: "produce", Duration: sec(20),
		Why: "storage leader and follower crash and lose every byte they had not fsynced",
		Steps: []nemesis.Step{
			step(5, nemesis.Crash, nemesis.StorageLeader, 3, "drop-unsynced"),
			step(12, nemesis.Crash, nemesis.StorageFollower, 3, "drop-unsynced"),
		}},
	{Name: "split-coordinators", Seed: 105, Topology: "split", Workload: "groups", Duration: sec(24),
		Why: "roles in processes of their own: a group coordinator killed, a storage node cut off while the replication worker " +
			"streams to it (replica appends abandoned mid-call must not crash the worker), then the worker killed, a group coordinator " +
			"cut off past its session while the groups commit through the other (it must not answer offset fetches from memory), " +
			"and a transaction coordinator killed",
		Steps: []nemesis.Step{
			step(5, nemesis.Kill, nemesis.GroupCoordinator, 3, ""),
			step(8.5, nemesis.Partition, nemesis.StorageFollower, 3, "isolate"),
			step(12, nemesis.Kill, nemesis.ReplicationWorker, 3, ""),
			step(15, nemesis.Partition, nemesis.GroupCoordinator, 5, "isolate"),
			step(20.5, nemesis.Kill, nemesis.TxnCoordinator, 3, ""),
		}},
}

// plantedCases are the shortest runs that catch each planted bug of a
// sluice_planted build (libs/planted).
var plantedCases = []chaosCase{
	{Name: "planted-ack-before-replication", Seed: 201, Topology: "dev3", Workload: "produce", Duration: sec(20),
		// An acknowledged record only the dead leader had is lost, and its
		// offset is given to another record by the new leader: the final
		// reads show the offset holding a different value than was
		// acknowledged (inconsistent offsets) as often as a plain loss.
		Planted: "ack_before_replication", Expect: []check.Kind{check.LostWrite, check.InconsistentOffsets},
		Why: "both followers paused for 2.5 s (within the session timeout, so they stay in the ISR) and the third storage node killed " +
			"meanwhile: with the bug it acknowledged acks=all writes only it had, and a follower that never saw them leads; twice",
		Steps: []nemesis.Step{
			step(4, nemesis.Pause, nemesis.StorageFollower, 2.5, ""),
			step(4.05, nemesis.Pause, nemesis.StorageFollower, 2.45, ""),
			step(5.5, nemesis.Kill, nemesis.StorageLeader, 3, ""),
			step(12, nemesis.Pause, nemesis.StorageFollower, 2.5, ""),
			step(12.05, nemesis.Pause, nemesis.StorageFollower, 2.45, ""),
			step(13.5, nemesis.Kill, nemesis.StorageLeader, 3, ""),
		}},
	{Name: "planted-truncate-to-hw", Seed: 202, Topology: "dev3", Workload: "produce-wide", Duration: sec(31),
		Planted: "truncate_to_hw", Expect: []check.Kind{check.LostWrite, check.InconsistentOffsets},
		Why: "a storage node cut off from the other storage nodes (not from the controller) learns of a new leader and, " +
			"with the bug, truncates to its high watermark, dropping acknowledged records it cannot fetch again; " +
			"then the new leader is killed too and the truncated replica, still in the ISR, leads",
		// The second kill waits for the first failover (the controller's
		// 3 s session timeout): the cut-off replica truncates when it learns
		// of the new leader, and only then is that leader killed, so the
		// truncated replica, still in the ISR (30 s lag time), is elected.
		// Twice, as the records at risk are only the last fetch round's
		// before the cut.
		Steps: []nemesis.Step{
			step(4, nemesis.Partition, nemesis.StorageFollower, 11, "storage"),
			step(5, nemesis.Kill, nemesis.StorageLeader, 7, ""),
			step(9.5, nemesis.Kill, nemesis.StorageLeader, 4, ""),
			step(17, nemesis.Partition, nemesis.StorageFollower, 11, "storage"),
			step(18, nemesis.Kill, nemesis.StorageLeader, 7, ""),
			step(22.5, nemesis.Kill, nemesis.StorageLeader, 4, ""),
		}},
	{Name: "planted-no-dedup-window", Seed: 203, Topology: "dev3", Workload: "produce", Duration: sec(20),
		Planted: "no_dedup_window", Expect: []check.Kind{check.Duplicate},
		Why: "leaders killed with idempotent batches in flight: the retries reach a new leader that has the first copy and must not append it again",
		Steps: []nemesis.Step{
			step(4, nemesis.Kill, nemesis.StorageLeader, 2, ""),
			step(8, nemesis.Kill, nemesis.StorageLeader, 2, ""),
			step(12, nemesis.Kill, nemesis.StorageLeader, 2, ""),
			step(16, nemesis.Kill, nemesis.StorageLeader, 2, ""),
		}},
	{Name: "planted-lso-off-by-one", Seed: 204, Topology: "all-in-one", Workload: "txn", Duration: sec(15),
		Planted: "lso_off_by_one", Expect: []check.Kind{check.AbortedRead, check.PrecommittedRead, check.TornTxn},
		Why:   "read_committed readers polling while transactions are open see the first record of one, which may then abort",
		Steps: []nemesis.Step{}},
	{Name: "planted-no-epoch-bump", Seed: 205, Topology: "all-in-one", Workload: "txn", Duration: sec(15),
		Planted: "no_epoch_bump", Expect: []check.Kind{check.AbortedRead, check.TornTxn, check.LostWrite},
		Why: "each committed EndTxn delivered again after the producer's next transaction wrote: without the epoch bump it ends that transaction",
		Steps: []nemesis.Step{
			step(3, nemesis.LateEndTxn, nemesis.Clients, 10, ""),
		}},
	{Name: "planted-stale-generation", Seed: 206, Topology: "all-in-one", Workload: "groups", Duration: sec(26),
		Planted: "stale_generation_accepted", Expect: []check.Kind{check.CommitRegression, check.DoubleOwnership},
		Why: "a classic member's heartbeats held past its 10 s session, so the group rebalances to a new generation; " +
			"meanwhile each classic member's acknowledged commit is delivered again late, after it committed in the new generation",
		Steps: []nemesis.Step{
			step(3, nemesis.LateCommit, nemesis.Clients, 21, "classic"),
			step(4, nemesis.StallMember, nemesis.Clients, 12, "classic"),
		}},
}

// negativeCases are negative controls: the normal binary with settings
// that allow acknowledged records to be lost, which the checker must find.
// They show the checker sees losses a faulty configuration causes, as the
// planted cases show it sees those bugs cause.
var negativeCases = []chaosCase{
	{Name: "negative-acks1-unclean", Seed: 301, Topology: "dev3", Workload: "produce-plain", Duration: sec(38),
		Acks: "1", TopicConfigs: map[string]string{"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
		// A follower leaves the ISR 2 s after it stops fetching, so the
		// cut-off replica is out of sync when the other two die.
		ServerArgs: []string{"--storage.replica-lag-time-max=2s"},
		Expect:     []check.Kind{check.LostWrite, check.InconsistentOffsets},
		Why: "acks=1 plain producers on topics with unclean leader election: a storage node cut off from the other storage nodes " +
			"falls out of the ISR while the leaders keep acknowledging writes, then the other two storage nodes are killed and the " +
			"out-of-sync replica is elected; the records only they had are lost when they return and truncate; twice, with a plain " +
			"leader kill in between (acks=1 loses what the leader had not replicated)",
		Steps: []nemesis.Step{
			step(3, nemesis.Partition, nemesis.StorageFollower, 9, "storage"),
			step(8, nemesis.Kill, nemesis.StorageLeader, 6, ""),
			step(8.05, nemesis.Kill, nemesis.StorageFollower, 5.95, ""),
			step(18, nemesis.Kill, nemesis.StorageLeader, 3, ""),
			step(24, nemesis.Partition, nemesis.StorageFollower, 9, "storage"),
			step(29, nemesis.Kill, nemesis.StorageLeader, 6, ""),
			step(29.05, nemesis.Kill, nemesis.StorageFollower, 5.95, ""),
		}},
}

// plantedCase returns the case of a planted bug.
func plantedCase(name string) (chaosCase, error) {
	var names []string
	for _, c := range plantedCases {
		if c.Planted == name {
			return c, nil
		}
		names = append(names, c.Planted)
	}
	return chaosCase{}, fmt.Errorf("no case for planted bug %q (known: %v)", name, names)
}

// soakDuration is the workload length of a soak case.
const soakDuration = 45 * time.Second

// seedCase returns the case of a seed: a PR-tier or planted case with that
// seed, or else a soak case drawn from it (topology, workload and
// schedule), so `make chaos SEED=n` replays either.
func seedCase(seed int64) chaosCase {
	for _, c := range slices.Concat(prCases, plantedCases, negativeCases) {
		if c.Seed == seed {
			return c
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x736f616b))
	c := chaosCase{Name: fmt.Sprintf("soak-%d", seed), Seed: seed, Duration: soakDuration}
	switch n := rng.IntN(20); {
	case n < 12:
		c.Topology = "dev3"
	case n < 17:
		c.Topology = "split"
	default:
		c.Topology = "all-in-one"
	}
	c.Workload = []string{"default", "default", "txn", "groups", "produce"}[rng.IntN(5)]
	c.Plan = nemesis.PlanOptions{SessionTimeout: sessionTimeout, Partitions: true}
	switch c.Topology {
	case "all-in-one":
		// One process: no peers to cut it from, and a crash that drops
		// unsynced bytes of the only replica loses what fsync policy
		// allows, which is not a bug.
		c.Plan.Partitions = false
		c.Plan.Kinds = []nemesis.Kind{nemesis.Kill, nemesis.Pause, nemesis.Clock, nemesis.Disk, nemesis.LateEndTxn}
		c.Plan.Targets = []nemesis.Role{nemesis.AnyProcess}
	case "dev3":
		c.Plan.Kinds = []nemesis.Kind{nemesis.Kill, nemesis.Kill, nemesis.Pause, nemesis.Crash, nemesis.Partition, nemesis.Partition,
			nemesis.Disk, nemesis.Clock, nemesis.Delay, nemesis.Duplicate, nemesis.Move, nemesis.LateEndTxn, nemesis.StallMember}
		// Storage leaders weigh three in six: a leader's death is what
		// elections, truncation and the high watermark are tested by.
		c.Plan.Targets = []nemesis.Role{nemesis.StorageLeader, nemesis.StorageLeader, nemesis.StorageLeader, nemesis.StorageFollower, nemesis.Controller, nemesis.StandbyController}
	case "split":
		c.Plan.Kinds = []nemesis.Kind{nemesis.Kill, nemesis.Kill, nemesis.Pause, nemesis.Crash, nemesis.Partition, nemesis.Delay, nemesis.Duplicate,
			nemesis.Move, nemesis.StallMember}
		c.Plan.Targets = []nemesis.Role{nemesis.StorageLeader, nemesis.StorageLeader, nemesis.Controller, nemesis.ReplicationWorker, nemesis.GroupCoordinator, nemesis.TxnCoordinator}
		// The replication worker is a process of its own: it fetches from
		// leaders and appends to followers over the network.
		c.Plan.Links = []nemesis.LinkPair{{From: nemesis.ReplicationWorker, To: nemesis.StorageLeader}, {From: nemesis.ReplicationWorker, To: nemesis.StorageFollower},
			{From: nemesis.StorageLeader, To: nemesis.Controller}, {From: nemesis.TxnCoordinator, To: nemesis.AnyProcess}, {From: nemesis.GroupCoordinator, To: nemesis.AnyProcess}}
	}
	return c
}
