package planted

import (
	"testing"
)

func TestOffBuildPlantsNothing(t *testing.T) {
	if Enabled {
		t.Skip("built with sluice_planted")
	}
	t.Setenv(EnvVar, AckBeforeReplication)
	for _, n := range Names {
		if On(n) {
			t.Fatalf("On(%q) is true in a build without the tag", n)
		}
	}
	if len(Active()) != 0 || Err() != nil {
		t.Fatalf("Active() = %v, Err() = %v in a build without the tag", Active(), Err())
	}
}
