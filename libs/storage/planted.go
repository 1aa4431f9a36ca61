package storage

import "github.com/sluice-io/sluice/libs/planted"

// The planted bugs of this package (see libs/planted), read once: they are
// on the data path. Without the tag sluice_planted the functions are the
// constant false and the compiler drops every branch on them.
var (
	plantNoDedupWindow = planted.On(planted.NoDedupWindow)
)

func plantedNoDedupWindow() bool { return planted.Enabled && plantNoDedupWindow }
