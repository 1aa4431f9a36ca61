package main

import (
	"fmt"
	"strings"
)

// writeGoals writes a report's goals under heading, each met, missed or
// not measured, with the measured value and the margin.
func writeGoals(b *strings.Builder, heading string, goals []condition) {
	fmt.Fprintf(b, "\n%s:\n\n", heading)
	for _, g := range goals {
		state := "missed"
		if !g.Known {
			state = "not measured"
		} else if g.Met {
			state = "**met**"
		}
		fmt.Fprintf(b, "- %s: %s (%.3fx; %s)\n", g.Text, state, g.Value, g.Margin)
	}
}

// writeFailures lists the failures of a report's rows (id gives a row's
// id and failures), if any failed.
func writeFailures[R any](b *strings.Builder, rows []R, id func(R) (string, []string)) {
	var lines []string
	for _, row := range rows {
		name, fs := id(row)
		for _, f := range fs {
			lines = append(lines, "- "+name+", "+f)
		}
	}
	if len(lines) > 0 {
		b.WriteString("\nFailures:\n\n" + strings.Join(lines, "\n") + "\n")
	}
}
