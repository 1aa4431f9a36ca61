package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// program is a program of this workspace the tests run as separate
// processes, built once per test binary (like the cluster harness builds
// sluiced) unless env names a prebuilt one.
type program struct {
	env, pkg, name string
	// tags are build tags (a planted bug for a negative control).
	tags string

	once sync.Once
	path string
	err  error
}

var (
	groupWorkerProgram = &program{env: "GROUPWORKER", pkg: "github.com/sluice-io/sluice/integration/cmd/groupworker", name: "groupworker"}
	txnWorkerProgram   = &program{env: "TXNWORKER", pkg: "github.com/sluice-io/sluice/integration/cmd/txnworker", name: "txnworker"}
	// kafkaCopierProgram is the franz-go exactly-once copier of the Kafka
	// transaction tests.
	kafkaCopierProgram = &program{env: "KAFKACOPIER", pkg: "github.com/sluice-io/sluice/integration/cmd/kafkacopier", name: "kafkacopier"}
	// plantedSluiced is sluiced built with the tag sluice_planted: the
	// bugs of libs/planted that SLUICE_PLANTED names in its environment
	// are on (see plantedEnv). The Makefile's bin/sluiced-planted is the
	// same build (env SLUICED_PLANTED).
	plantedSluiced = &program{env: "SLUICED_PLANTED", pkg: "github.com/sluice-io/sluice/services/sluiced", name: "sluiced-planted", tags: "sluice_planted"}
)

func (p *program) get(t *testing.T) string {
	t.Helper()
	if p.env != "" {
		if path := os.Getenv(p.env); path != "" {
			return path
		}
	}
	p.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "sluice-it-build")
		if p.err = os.MkdirAll(dir, 0o755); p.err != nil {
			return
		}
		p.path = filepath.Join(dir, p.name)
		args := []string{"build", "-o", p.path}
		if p.tags != "" {
			args = append(args, "-tags", p.tags)
		}
		if out, err := exec.Command("go", append(args, p.pkg)...).CombinedOutput(); err != nil {
			p.err = fmt.Errorf("building %s: %v\n%s", p.name, err, out)
		}
	})
	require.NoError(t, p.err)
	return p.path
}

func groupWorker(t *testing.T) string { return groupWorkerProgram.get(t) }

func txnWorker(t *testing.T) string { return txnWorkerProgram.get(t) }
