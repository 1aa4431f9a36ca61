//go:build sluice_planted_no_epoch_bump

package txncoord

// plantedNoEpochBump, set only by the build tag sluice_planted_no_epoch_bump,
// plants the bug of the transaction protocol before KIP-890 for the
// tests' negative control: EndTxn keeps the producer epoch, and a late
// EndTxn of an ended transaction is taken for the producer's next one.
// Never ship a build with it.
const plantedNoEpochBump = true
