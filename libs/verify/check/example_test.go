package check_test

import (
	"fmt"

	"github.com/sluice-io/sluice/libs/verify/check"
)

// A transaction over two partitions commits; a read_committed consumer that
// read both partitions from the start saw only half of it.
func Example() {
	var rec check.Recorder
	rec.Txn(check.Txn{
		Process: 1,
		Sends: []check.Send{
			{Topic: "t", Partition: 0, Key: "a", Value: "a", Acked: true, Offset: 0},
			{Topic: "t", Partition: 1, Key: "b", Value: "b", Acked: true, Offset: 0},
		},
		Commit:  true,
		Outcome: check.OK,
	})
	rec.Poll(check.Poll{
		Process:   10,
		Isolation: check.ReadCommitted,
		Seeks:     []check.Position{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}},
		Reads:     []check.Read{{Topic: "t", Partition: 0, Offset: 0, Key: "a", Value: "a"}},
		Ends:      []check.Position{{Topic: "t", Partition: 0, Offset: 2}, {Topic: "t", Partition: 1, Offset: 2}},
		Final:     true,
	})
	res, err := check.Check(rec.History(), check.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Valid())
	for _, a := range res.Anomalies {
		fmt.Println(a)
	}
	// Output:
	// false
	// torn-transaction: txn 0 (process 1, committed): read_committed consumers [10] saw ["a"] but read past ["b"]
}

// A producer that a newer InitProducerId fenced still has its commit
// acknowledged; the summary names the transaction and the init.
func ExampleResult_Summary() {
	h := check.History{
		Txns: []check.Txn{{Process: 1, TransactionalID: "copier", ProducerID: 7, Epoch: 2,
			Sends:  []check.Send{{Topic: "t", Partition: 0, Key: "a", Value: "a", Acked: true, Offset: 0}},
			Commit: true, Outcome: check.OK, Start: 10, CommitStart: 30, End: 31}},
		Inits: []check.Init{{Process: 2, TransactionalID: "copier", Start: 15, End: 20, ProducerID: 7, Epoch: 3,
			Outcome: check.OK}},
		Polls: []check.Poll{{Process: 3, Isolation: check.ReadCommitted, Start: 40, End: 41, Final: true,
			Seeks: []check.Position{{Topic: "t", Partition: 0, Offset: 0}},
			Reads: []check.Read{{Topic: "t", Partition: 0, Offset: 0, Key: "a", Value: "a"}},
			Ends:  []check.Position{{Topic: "t", Partition: 0, Offset: 2}}}},
	}
	res, err := check.Check(h, check.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Summary())
	// Output:
	// INVALID: 1 anomaly (zombie-ack)
	// transactions: 1 (1 committed, 0 aborted, 0 indeterminate of which 0 seen committed)
	// values sent: 1; reads: 1 in 1 polls; committed values no read_committed reader returned: 0; aborted values read uncommitted: 0
	//   zombie-ack: 1
	//     txn 0 (process 1, transactional id copier, producer 7 epoch 2) sent EndTxn at 30 and was acknowledged as committed, but init 0 (process 2) had returned producer 7 epoch 3 at 20: a fenced producer committed; the coordinator must refuse EndTxn from an older epoch
}
