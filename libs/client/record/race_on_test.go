//go:build race

package record

// raceEnabled skips allocation checks: the race detector allocates and
// sync.Pool drops items at random under it.
const raceEnabled = true
