package replica

import "github.com/sluice-io/sluice/libs/planted"

// The planted bugs of this package (see libs/planted), read once: they are
// on the data path. Without the tag sluice_planted the functions are the
// constant false and the compiler drops every branch on them.
var (
	plantAckBeforeReplication = planted.On(planted.AckBeforeReplication)
	plantTruncateToHW         = planted.On(planted.TruncateToHW)
	plantLSOOffByOne          = planted.On(planted.LSOOffByOne)
)

func plantedAckBeforeReplication() bool { return planted.Enabled && plantAckBeforeReplication }

func plantedTruncateToHW() bool { return planted.Enabled && plantTruncateToHW }

func plantedLSOOffByOne() bool { return planted.Enabled && plantLSOOffByOne }
