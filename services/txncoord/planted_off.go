//go:build !sluice_planted_no_epoch_bump

package txncoord

// plantedNoEpochBump is false in every real build. The transaction tests
// build sluiced with the tag sluice_planted_no_epoch_bump to check that
// their history checker catches the bug KIP-890 fixed (see planted_on.go).
const plantedNoEpochBump = false
