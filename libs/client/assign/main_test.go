package assign

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// rapid runs 100 cases per property by default; these properties are
	// cheap, so run more unless -rapid.checks says otherwise.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("1000"); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
