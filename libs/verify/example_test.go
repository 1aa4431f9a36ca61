package verify_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-io/sluice/libs/verify"
)

// Run a minute of the default workload against a local cluster and print
// the verdict; the report files go to ./verify-report.
func ExampleRun() {
	rep, err := verify.Run(context.Background(), verify.Config{
		Bootstrap: []string{"127.0.0.1:9090"},
		Duration:  time.Minute,
		Out:       "verify-report",
	})
	if err != nil {
		log.Fatal(err) // the cluster could not be reached, or bad config
	}
	fmt.Println(rep.Verdict())
	if !rep.Valid() {
		fmt.Print(rep.Summary())
	}
}
