//go:build sluice_planted

package planted

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := parse(" lso_off_by_one,no_dedup_window,,lso_off_by_one ")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{LSOOffByOne, NoDedupWindow}) {
		t.Fatalf("parse = %v", got)
	}
	got, err = parse("no_dedup_window,no_such_bug")
	if err == nil || !strings.Contains(err.Error(), "no_such_bug") {
		t.Fatalf("an unknown name must be an error naming it, got %v", err)
	}
	if !slices.Equal(got, []string{NoDedupWindow}) {
		t.Fatalf("the known names are kept: %v", got)
	}
	if got, err := parse(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
}

func TestOnReadsTheListFixedAtStart(t *testing.T) {
	old := active
	t.Cleanup(func() { active = old })
	active = []string{TruncateToHW}
	if !On(TruncateToHW) || On(AckBeforeReplication) {
		t.Fatal("On does not follow the active list")
	}
}
