package record_test

import (
	"fmt"

	"github.com/sluice-io/sluice/libs/client/record"
)

// A producer builds a batch, the leader validates it and assigns offsets, and
// a plain-records consumer decodes it.
func Example() {
	b := record.NewBuilder(record.CodecZstd)
	_ = b.AppendKV(1_700_000_000_000, []byte("user-1"), []byte("signed up"))
	_ = b.Append(&record.Record{
		Timestamp: 1_700_000_000_005,
		Key:       []byte("user-1"),
		Value:     nil, // a tombstone
		Headers:   []record.Header{{Key: "trace", Value: []byte("abc")}},
	})
	batch, err := b.Build()
	if err != nil {
		panic(err)
	}

	// Leader side: validate without decoding records, then stamp offsets
	// and the leader epoch in place.
	sum, err := record.Validate(batch, record.ValidateOptions{Origin: record.FromClient})
	if err != nil {
		panic(err)
	}
	next := record.AssignOffsets(batch, 42, 7)
	fmt.Println("batches:", sum.Batches, "offsets:", sum.Offsets, "next offset:", next)

	// Consumer side: decode the records.
	var it record.Iterator
	it.Reset(batch)
	for it.Next() {
		r := it.Record()
		fmt.Printf("offset %d key %s value %q tombstone=%v headers=%d epoch=%d\n",
			r.Offset, r.Key, r.Value, r.Value == nil, len(r.Headers), it.Batch().PartitionLeaderEpoch)
	}
	if err := it.Err(); err != nil {
		panic(err)
	}
	// Output:
	// batches: 1 offsets: 2 next offset: 44
	// offset 42 key user-1 value "signed up" tombstone=false headers=0 epoch=7
	// offset 43 key user-1 value "" tombstone=true headers=1 epoch=7
}
