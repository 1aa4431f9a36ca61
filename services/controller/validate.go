package controller

import (
	"fmt"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/naming"
)

// registerValidators installs the checks that need no cluster state: a
// request that fails them is refused as a whole with InvalidArgument and
// every offending field, and nothing changes. Checks that need state (does
// the topic exist, are there enough live nodes) answer per item.
func registerValidators(v *grpcx.Validators) {
	grpcx.Register(v, validateCreateTopics)
	grpcx.Register(v, func(r *controllerv1.DeleteTopicsRequest) error {
		var f errs.Fields
		if len(r.GetNames()) == 0 {
			f.Add("names", "at least one topic name is required")
		}
		checkNames(&f, "names", r.GetNames())
		return f.Err()
	})
	grpcx.Register(v, func(r *controllerv1.DescribeTopicsRequest) error {
		var f errs.Fields
		checkNames(&f, "names", r.GetNames())
		return f.Err()
	})
	grpcx.Register(v, validateCreatePartitions)
	grpcx.Register(v, func(r *controllerv1.ElectLeadersRequest) error {
		var f errs.Fields
		switch r.GetElectionType() {
		case controllerv1.ElectionType_ELECTION_TYPE_PREFERRED:
		case controllerv1.ElectionType_ELECTION_TYPE_UNCLEAN:
			if len(r.GetPartitions()) == 0 {
				f.Add("partitions", "an unclean election must name its partitions explicitly; it may lose records")
			}
		default:
			f.Add("election_type", "must be PREFERRED or UNCLEAN")
		}
		for i, p := range r.GetPartitions() {
			checkPartition(&f, fmt.Sprintf("partitions[%d]", i), p.GetTopic(), p.GetPartition())
		}
		return f.Err()
	})
	grpcx.Register(v, func(r *controllerv1.AlterPartitionReassignmentsRequest) error {
		var f errs.Fields
		if len(r.GetReassignments()) == 0 {
			f.Add("reassignments", "at least one reassignment is required")
		}
		for i, re := range r.GetReassignments() {
			path := fmt.Sprintf("reassignments[%d]", i)
			checkPartition(&f, path+".partition", re.GetPartition().GetTopic(), re.GetPartition().GetPartition())
			checkReplicaList(&f, path+".replicas", re.GetReplicas(), true)
		}
		return f.Err()
	})
	grpcx.Register(v, func(r *controllerv1.RegisterBrokerRequest) error {
		var f errs.Fields
		if r.GetBrokerId() < 0 {
			f.Add("broker_id", "must not be negative, got %d", r.GetBrokerId())
		}
		if r.GetIncarnationId() == "" {
			f.Add("incarnation_id", "is required: a random id per process start")
		}
		if len(r.GetEndpoints()) == 0 {
			f.Add("endpoints", "at least one listener is required")
		}
		for i, e := range r.GetEndpoints() {
			if e.GetHost() == "" || e.GetPort() <= 0 || e.GetPort() > 65535 {
				f.Add(fmt.Sprintf("endpoints[%d]", i), "needs a host and a port in 1..65535, got %q:%d", e.GetHost(), e.GetPort())
			}
		}
		return f.Err()
	})
	grpcx.Register(v, func(r *controllerv1.AlterPartitionRequest) error {
		var f errs.Fields
		for i, ch := range r.GetChanges() {
			path := fmt.Sprintf("changes[%d]", i)
			checkPartition(&f, path, ch.GetTopic(), ch.GetPartition())
			checkReplicaList(&f, path+".new_isr", ch.GetNewIsr(), false)
		}
		return f.Err()
	})
	grpcx.Register(v, validateConfigResources)
	grpcx.Register(v, validateAlterConfigs)
}

func checkNames(f *errs.Fields, path string, names []string) {
	for i, n := range names {
		if err := naming.ValidateTopic(n); err != nil {
			f.AddCode(errs.InvalidTopic, fmt.Sprintf("%s[%d]", path, i), "%v", err)
		}
	}
}

func checkPartition(f *errs.Fields, path, topic string, partition int32) {
	if err := naming.ValidateTopic(topic); err != nil {
		f.AddCode(errs.InvalidTopic, path+".topic", "%v", err)
	}
	if partition < 0 {
		f.Add(path+".partition", "must not be negative, got %d", partition)
	}
}

func checkReplicaList(f *errs.Fields, path string, replicas []int32, emptyOK bool) {
	if len(replicas) == 0 && !emptyOK {
		f.Add(path, "must not be empty")
	}
	seen := map[int32]bool{}
	for _, r := range replicas {
		if r < 0 {
			f.Add(path, "node ids must not be negative, got %d", r)
		}
		if seen[r] {
			f.Add(path, "node %d appears twice", r)
		}
		seen[r] = true
	}
}

func validateCreateTopics(r *controllerv1.CreateTopicsRequest) error {
	var f errs.Fields
	if len(r.GetTopics()) == 0 {
		f.Add("topics", "at least one topic is required")
	}
	seen := map[string]bool{}
	for i, t := range r.GetTopics() {
		path := fmt.Sprintf("topics[%d]", i)
		if err := naming.ValidateTopic(t.GetName()); err != nil {
			f.AddCode(errs.InvalidTopic, path+".name", "%v", err)
		}
		if seen[t.GetName()] {
			f.Add(path+".name", "topic %q appears more than once in the request", t.GetName())
		}
		seen[t.GetName()] = true
		if t.NumPartitions != nil && (t.GetNumPartitions() < 1 || t.GetNumPartitions() > maxPartitionsPerTopic) {
			f.AddCode(errs.InvalidPartitions, path+".num_partitions", "must be between 1 and %d, got %d; leave it unset for the cluster default",
				maxPartitionsPerTopic, t.GetNumPartitions())
		}
		if t.ReplicationFactor != nil && (t.GetReplicationFactor() < 1 || t.GetReplicationFactor() > 64) {
			f.AddCode(errs.InvalidReplicationFactor, path+".replication_factor", "must be between 1 and 64, got %d; leave it unset for the cluster default",
				t.GetReplicationFactor())
		}
		if len(t.GetAssignments()) > 0 {
			checkAssignments(&f, path, t)
		}
		for k := range t.GetConfigs() {
			if k == "" {
				f.AddCode(errs.InvalidConfig, path+".configs", "config names must not be empty")
			}
		}
	}
	return f.Err()
}

func checkAssignments(f *errs.Fields, path string, t *controllerv1.TopicSpec) {
	if t.NumPartitions != nil || t.ReplicationFactor != nil {
		f.AddCode(errs.InvalidReplicaAssignment, path+".assignments", "give either assignments or num_partitions/replication_factor, not both")
	}
	n := len(t.GetAssignments())
	if n > maxPartitionsPerTopic {
		f.AddCode(errs.InvalidPartitions, path+".assignments", "at most %d partitions, got %d", maxPartitionsPerTopic, n)
		return
	}
	covered := make([]bool, n)
	rf := len(t.GetAssignments()[0].GetReplicas())
	for j, a := range t.GetAssignments() {
		ap := fmt.Sprintf("%s.assignments[%d]", path, j)
		if a.GetPartition() < 0 || int(a.GetPartition()) >= n || covered[a.GetPartition()] {
			f.AddCode(errs.InvalidReplicaAssignment, ap+".partition", "partitions must be numbered 0..%d, each once; got %d", n-1, a.GetPartition())
		} else {
			covered[a.GetPartition()] = true
		}
		if len(a.GetReplicas()) != rf {
			f.AddCode(errs.InvalidReplicaAssignment, ap+".replicas", "every partition needs the same number of replicas (%d), got %d", rf, len(a.GetReplicas()))
		}
		checkReplicaList(f, ap+".replicas", a.GetReplicas(), false)
	}
}

func validateCreatePartitions(r *controllerv1.CreatePartitionsRequest) error {
	var f errs.Fields
	if len(r.GetTopics()) == 0 {
		f.Add("topics", "at least one topic is required")
	}
	for i, t := range r.GetTopics() {
		path := fmt.Sprintf("topics[%d]", i)
		if err := naming.ValidateTopic(t.GetTopic()); err != nil {
			f.AddCode(errs.InvalidTopic, path+".topic", "%v", err)
		}
		if t.GetTotalCount() < 1 {
			f.AddCode(errs.InvalidPartitions, path+".total_count", "must be at least 1, got %d", t.GetTotalCount())
		}
		for j, a := range t.GetAssignments() {
			checkReplicaList(&f, fmt.Sprintf("%s.assignments[%d].replicas", path, j), a.GetReplicas(), false)
		}
	}
	return f.Err()
}
