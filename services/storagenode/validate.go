package storagenode

import (
	"fmt"

	commonv1 "github.com/sluice-io/sluice/gen/go/sluice/common/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/grpcx"
	"github.com/sluice-io/sluice/libs/naming"
)

// registerValidators installs the input checks of every StorageService
// request. They run before the handler, so malformed input is refused with
// INVALID_REQUEST (gRPC InvalidArgument) and a list of offending fields,
// and never reaches a log.
func registerValidators(v *grpcx.Validators) {
	grpcx.Register(v, validateProduce)
	// ProduceStreamRequest is validated by the handler, which answers a bad
	// request on the stream (with its request id) and keeps the stream.
	grpcx.Register(v, validateFetch)
	grpcx.Register(v, validateListOffsets)
	grpcx.Register(v, validateOffsetForLeaderEpoch)
	grpcx.Register(v, validateDeleteRecords)
}

// partitionChecker validates the (topic, partition) of each item of a
// multi-partition request and refuses duplicates.
type partitionChecker struct {
	f    *errs.Fields
	seen map[string]bool
}

func newPartitionChecker(f *errs.Fields) *partitionChecker {
	return &partitionChecker{f: f, seen: map[string]bool{}}
}

func (c *partitionChecker) check(path, topic string, partition int32) {
	if err := naming.ValidateTopic(topic); err != nil {
		c.f.Add(path+".topic", "%v", err)
	}
	if partition < 0 {
		c.f.Add(path+".partition", "must not be negative, got %d", partition)
	}
	key := fmt.Sprintf("%s/%d", topic, partition)
	if c.seen[key] {
		c.f.Add(path, "partition %s-%d appears more than once in the request", topic, partition)
	}
	c.seen[key] = true
}

func checkEnum(f *errs.Fields, field string, v int32, name func() string, max int32) {
	if v < 0 || v > max {
		f.Add(field, "%d is not a known value (%s)", v, name())
	}
}

func validateProduce(r *storagev1.ProduceRequest) error {
	var f errs.Fields
	checkEnum(&f, "acks", int32(r.GetAcks()), func() string { return "use ACKS_NONE, ACKS_LEADER or ACKS_ALL" },
		int32(storagev1.Acks_ACKS_ALL))
	if r.GetTimeoutMs() < 0 {
		f.Add("timeout_ms", "must not be negative, got %d", r.GetTimeoutMs())
	}
	if len(r.GetPartitions()) == 0 {
		f.Add("partitions", "at least one partition with records is required")
	}
	pc := newPartitionChecker(&f)
	for i, p := range r.GetPartitions() {
		path := fmt.Sprintf("partitions[%d]", i)
		pc.check(path, p.GetTopic(), p.GetPartition())
		switch d := p.GetData().(type) {
		case *storagev1.ProducePartition_Batches:
			if len(d.Batches) == 0 {
				f.Add(path+".batches", "is empty; send at least one record batch")
			}
		case *storagev1.ProducePartition_Records:
			if len(d.Records.GetRecords()) == 0 {
				f.Add(path+".records", "is empty; send at least one record")
			}
		default:
			f.Add(path, "has no data: set batches or records")
		}
		checkEnum(&f, path+".compression", int32(p.GetCompression()), func() string { return "use NONE, GZIP, SNAPPY, LZ4 or ZSTD" },
			int32(commonv1.Compression_COMPRESSION_ZSTD))
	}
	return f.Err()
}

func validateFetch(r *storagev1.FetchRequest) error {
	var f errs.Fields
	if len(r.GetPartitions()) == 0 {
		f.Add("partitions", "at least one partition is required")
	}
	for _, fv := range []struct {
		name string
		v    int32
	}{{"max_wait_ms", r.GetMaxWaitMs()}, {"min_bytes", r.GetMinBytes()}, {"max_bytes", r.GetMaxBytes()}} {
		if fv.v < 0 {
			f.Add(fv.name, "must not be negative, got %d", fv.v)
		}
	}
	checkEnum(&f, "isolation_level", int32(r.GetIsolationLevel()), func() string { return "use READ_UNCOMMITTED or READ_COMMITTED" },
		int32(commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED))
	checkEnum(&f, "format", int32(r.GetFormat()), func() string { return "use BATCHES or RECORDS" },
		int32(storagev1.RecordFormat_RECORD_FORMAT_RECORDS))
	pc := newPartitionChecker(&f)
	for i, p := range r.GetPartitions() {
		path := fmt.Sprintf("partitions[%d]", i)
		pc.check(path, p.GetTopic(), p.GetPartition())
		if p.GetFetchOffset() < 0 {
			f.Add(path+".fetch_offset", "must not be negative, got %d; use ListOffsets to find the earliest or latest offset", p.GetFetchOffset())
		}
		if p.GetPartitionMaxBytes() < 0 {
			f.Add(path+".partition_max_bytes", "must not be negative, got %d", p.GetPartitionMaxBytes())
		}
	}
	return f.Err()
}

func validateListOffsets(r *storagev1.ListOffsetsRequest) error {
	var f errs.Fields
	if len(r.GetPartitions()) == 0 {
		f.Add("partitions", "at least one partition is required")
	}
	checkEnum(&f, "isolation_level", int32(r.GetIsolationLevel()), func() string { return "use READ_UNCOMMITTED or READ_COMMITTED" },
		int32(commonv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED))
	pc := newPartitionChecker(&f)
	for i, p := range r.GetPartitions() {
		path := fmt.Sprintf("partitions[%d]", i)
		pc.check(path, p.GetTopic(), p.GetPartition())
		switch p.GetSpec() {
		case storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST, storagev1.OffsetSpec_OFFSET_SPEC_LATEST, storagev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP:
		case storagev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
			if p.GetTimestampMs() < 0 {
				f.Add(path+".timestamp_ms", "must not be negative, got %d", p.GetTimestampMs())
			}
		default:
			f.Add(path+".spec", "must be EARLIEST, LATEST, TIMESTAMP or MAX_TIMESTAMP")
		}
	}
	return f.Err()
}

func validateOffsetForLeaderEpoch(r *storagev1.OffsetForLeaderEpochRequest) error {
	var f errs.Fields
	if len(r.GetPartitions()) == 0 {
		f.Add("partitions", "at least one partition is required")
	}
	pc := newPartitionChecker(&f)
	for i, p := range r.GetPartitions() {
		path := fmt.Sprintf("partitions[%d]", i)
		pc.check(path, p.GetTopic(), p.GetPartition())
		if p.GetLeaderEpoch() < 0 {
			f.Add(path+".leader_epoch", "must not be negative, got %d", p.GetLeaderEpoch())
		}
	}
	return f.Err()
}

func validateDeleteRecords(r *storagev1.DeleteRecordsRequest) error {
	var f errs.Fields
	if len(r.GetPartitions()) == 0 {
		f.Add("partitions", "at least one partition is required")
	}
	if r.GetTimeoutMs() < 0 {
		f.Add("timeout_ms", "must not be negative, got %d", r.GetTimeoutMs())
	}
	pc := newPartitionChecker(&f)
	for i, p := range r.GetPartitions() {
		path := fmt.Sprintf("partitions[%d]", i)
		pc.check(path, p.GetTopic(), p.GetPartition())
		if p.GetOffset() < -1 {
			f.Add(path+".offset", "must be an offset or -1 (the high watermark), got %d", p.GetOffset())
		}
	}
	return f.Err()
}
