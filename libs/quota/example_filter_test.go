package quota_test

import (
	"fmt"

	"github.com/sluice-io/sluice/libs/quota"
)

// An entry is validated as the controller validates it, and a
// DescribeClientQuotas filter selects entities as KIP-546 describes.
func ExampleFilter() {
	entries := []quota.Entry{
		{Entity: []quota.Component{{Type: quota.EntityClientID, Name: "app1"}}, Values: map[string]float64{quota.ProducerByteRate: 1 << 20}},
		{Entity: []quota.Component{{Type: quota.EntityUser, Name: "alice"}, {Type: quota.EntityClientID, Default: true}}, Values: map[string]float64{quota.ConsumerByteRate: 5 << 20}},
		{Entity: []quota.Component{{Type: quota.EntityUser, Name: "alice"}}, Values: map[string]float64{quota.RequestPercentage: 50}},
	}
	bad := quota.Entry{Entity: []quota.Component{{Type: quota.EntityIP, Name: "10.0.0.7"}}, Values: map[string]float64{quota.ProducerByteRate: 1}}
	fmt.Println(bad.Validate())

	alice := quota.Filter{Components: []quota.FilterComponent{{Type: quota.EntityUser, Match: quota.MatchExact, Name: "alice"}}}
	for _, strict := range []bool{false, true} {
		alice.Strict = strict
		for _, e := range entries {
			if alice.Matches(e.Entity) {
				fmt.Printf("strict=%t: %s\n", strict, quota.EntityKey(e.Entity))
			}
		}
	}
	// Output:
	// quota key producer_byte_rate applies to user/client-id entities, not ip
	// strict=false: user=alice,client-id=<default>
	// strict=false: user=alice
	// strict=true: user=alice
}
