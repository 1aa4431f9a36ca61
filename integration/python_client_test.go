package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/integration/cluster"
)

// The Python example of docs/api.md runs as written against a one-process
// cluster: stubs generated with Debian's protoc and grpc_python_plugin,
// routing through GetMetadata, plain-record produce and fetch, per-item
// errors, and a call error decoded from its status details. .ci/run installs
// the toolchain; a machine without it skips.
func TestPythonClientExample(t *testing.T) {
	python := "/usr/bin/python3"
	plugin := "/usr/bin/grpc_python_plugin"
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not installed (apt-get install protobuf-compiler protobuf-compiler-grpc python3-grpcio)")
	}
	for _, p := range []string{python, plugin} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s not installed (apt-get install protobuf-compiler-grpc python3-grpcio)", p)
		}
	}
	if err := exec.Command(python, "-c", "import grpc").Run(); err != nil {
		t.Skip("python3-grpcio not installed")
	}

	root, err := filepath.Abs("..")
	require.NoError(t, err)
	example := filepath.Join(root, "docs", "examples", "python")
	out := t.TempDir()
	protos, err := filepath.Glob(filepath.Join(root, "proto", "sluice", "*", "v1", "*.proto"))
	require.NoError(t, err)
	args := []string{"-I", filepath.Join(root, "proto"), "-I", example,
		"--python_out=" + out, "--grpc_out=" + out, "--plugin=protoc-gen-grpc=" + plugin}
	for _, p := range protos {
		rel, err := filepath.Rel(filepath.Join(root, "proto"), p)
		require.NoError(t, err)
		args = append(args, rel)
	}
	args = append(args, "rpc/status.proto")
	gen := exec.Command(protoc, args...)
	gen.Dir = example
	b, err := gen.CombinedOutput()
	require.NoError(t, err, "protoc: %s", b)

	c := cluster.Start(t, cluster.Options{Combined: true})
	run := exec.Command(python, filepath.Join(example, "route.py"), c.Bootstrap()[0], "pyorders")
	run.Env = append(os.Environ(), "PYTHONPATH="+out, "PYTHONDONTWRITEBYTECODE=1")
	run.Dir = out
	b, err = run.CombinedOutput()
	got := string(b)
	require.NoError(t, err, "route.py: %s", got)
	for _, want := range []string{
		"produced 3 records at offset 0",
		"offset 0: k0=v0", "offset 2: k2=v2",
		"ListOffsets: INVALID_ARGUMENT",
		"ErrorInfo: ERROR_CODE_INVALID_REQUEST retriable=False",
		"field partitions[0].partition: must not be negative, got -1",
	} {
		require.True(t, strings.Contains(got, want), "route.py output lacks %q:\n%s", want, got)
	}
}
