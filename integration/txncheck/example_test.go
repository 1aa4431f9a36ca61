package txncheck_test

import (
	"fmt"

	"github.com/sluice-io/sluice/integration/txncheck"
)

// A transaction over two partitions commits; a read_committed consumer that
// read both partitions from the start saw only half of it.
func Example() {
	var rec txncheck.Recorder
	rec.Txn(txncheck.Txn{
		Process: 1,
		Sends: []txncheck.Send{
			{Topic: "t", Partition: 0, Key: "a", Value: "a", Acked: true, Offset: 0},
			{Topic: "t", Partition: 1, Key: "b", Value: "b", Acked: true, Offset: 0},
		},
		Commit:  true,
		Outcome: txncheck.OK,
	})
	rec.Poll(txncheck.Poll{
		Process:   10,
		Isolation: txncheck.ReadCommitted,
		Seeks:     []txncheck.Position{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}},
		Reads:     []txncheck.Read{{Topic: "t", Partition: 0, Offset: 0, Key: "a", Value: "a"}},
		Ends:      []txncheck.Position{{Topic: "t", Partition: 0, Offset: 2}, {Topic: "t", Partition: 1, Offset: 2}},
		Final:     true,
	})
	res, err := txncheck.Check(rec.History())
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
