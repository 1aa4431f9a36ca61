package netns_test

import (
	"fmt"
	"log"

	"github.com/sluice-io/sluice/libs/verify/netns"
)

// Three hosts; the third is cut off from the first two, then healed. It
// needs root, so it is compiled but not run.
func Example() {
	if err := netns.Available(); err != nil {
		log.Fatal(err)
	}
	net, err := netns.New(3, netns.Names{Bridge: "slxb", Host: "slx", Subnet: "10.234", Table: "sluiceexample"})
	if err != nil {
		log.Fatal(err)
	}
	defer net.Close()
	fmt.Println(net.IPs(), net.Exec(0)) // devcluster.Spec.Hosts and Spec.Wrap
	if err := net.Isolate(2, []int{0, 1}); err != nil {
		log.Fatal(err)
	}
	if err := net.Heal(2); err != nil {
		log.Fatal(err)
	}
}
