// Package nemesis injects faults into a running cluster on a schedule drawn
// from one seed, so that a run of the checked workload (libs/verify) that
// finds an anomaly can be replayed.
//
// A schedule is a list of Steps: a fault kind (kill, pause, crash,
// partition, disk, clock, delay, duplicate, move), the role of the process
// it hits (the active controller, the leader of a workload partition, a
// coordinator; the process is chosen when the step starts, since leaders
// move), when it starts and how long it lasts. Plan draws one from a seed; the same seed
// and options give the same schedule. Run executes a schedule against a
// Target, one step after the other, undoing each fault when its time is up
// (restarting a killed or crashed process, resuming a paused one, healing a
// partition), and reports each fault as a check.Fault. Log collects them
// and is the verify.FaultSource of a run.
//
// ClusterTarget is the Target over a libs/devcluster cluster: roles are
// found through the SDK (DescribeCluster for the active controller,
// metadata for partition leaders, FindCoordinator for group coordinators),
// partitions need the processes in network namespaces (libs/verify/netns;
// root, iproute2 and nftables), and crash, disk, clock, delay and
// duplicate faults need the processes started with
// --unsafe.fault-injection (HTTPFaults).
//
// Delays and duplicates are not made in the network: the kernel here has
// no netem, so tc cannot delay packets, and a proxy in front of every
// process would change the addresses the processes advertise to each
// other. They are made at the message layer instead: Delay and Duplicate
// steps install a link fault (faultapi.LinkRequest) on the target process,
// whose gRPC client interceptors slow down or re-send its calls to the
// peer process (a Link names the peer's role, resolved when the step
// starts).
//
//	steps, _ := nemesis.Plan(seed, nemesis.PlanOptions{Duration: time.Minute, Partitions: net != nil})
//	var log nemesis.Log
//	target := &nemesis.ClusterTarget{Cluster: c, Client: cl, TopicPrefix: prefix, Net: net, Faults: nemesis.HTTPFaults}
//	go nemesis.Run(ctx, steps, target, log.Add)
//	report, err := verify.Run(ctx, verify.Config{Bootstrap: c.Bootstrap(), Duration: time.Minute, Faults: &log})
package nemesis
