//go:build sluice_planted

package planted

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Enabled is true in a build with the tag sluice_planted: the bugs named
// in SLUICE_PLANTED are on.
const Enabled = true

var (
	active []string
	envErr error
)

func init() { active, envErr = parse(os.Getenv(EnvVar)) }

// parse reads a comma-separated list of bug names; unknown names are an
// error (and left out), so a typo never passes for a planted bug.
func parse(s string) ([]string, error) {
	var out, unknown []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case slices.Contains(Names, n):
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		default:
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return out, fmt.Errorf("%s: unknown planted bug(s) %s (known: %s)", EnvVar,
			strings.Join(unknown, ", "), strings.Join(Names, ", "))
	}
	return out, nil
}

// On reports whether the bug name is planted. It reads a list fixed at
// start; hot paths still copy it into a package variable at init.
func On(name string) bool { return slices.Contains(active, name) }

// Active lists the planted bugs.
func Active() []string { return slices.Clone(active) }

// Err reports unknown names in SLUICE_PLANTED; sluiced refuses to start
// with one.
func Err() error { return envErr }
