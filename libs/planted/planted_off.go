//go:build !sluice_planted

package planted

// Enabled is false in every real build: no bug can be switched on.
const Enabled = false

// On reports whether the bug name is planted: never, in a real build.
func On(name string) bool { return false }

// Active lists the planted bugs: none in a real build.
func Active() []string { return nil }

// Err reports a problem with SLUICE_PLANTED: none in a real build, where it
// is not read.
func Err() error { return nil }
