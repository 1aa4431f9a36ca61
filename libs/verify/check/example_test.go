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
