// Command sluice is Sluice's command-line client: cluster, topic, produce,
// consume, group and perf commands against any node, and `sluice dev` to run
// a multi-process cluster on this machine.
package main

import (
	"os"

	"github.com/sluice-io/sluice/tools/sluice/cmd"
)

func main() {
	os.Exit(cmd.Execute())
}
