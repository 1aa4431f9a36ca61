package txncoord

import "github.com/sluice-io/sluice/libs/planted"

// plantedNoEpochBump reports whether the bug of the transaction protocol
// before KIP-890 is planted, for the tests' negative control: EndTxn keeps
// the producer epoch, and a late EndTxn of an ended transaction is taken
// for the producer's next one. Only a build with the tag sluice_planted and
// SLUICE_PLANTED=no_epoch_bump has it (see libs/planted); in every other
// build it is the constant false.
func plantedNoEpochBump() bool { return planted.On(planted.NoEpochBump) }
