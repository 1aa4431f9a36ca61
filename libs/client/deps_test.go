package client_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// serverSide names packages a program that uses only the SDK must not link:
// the embedded etcd server, the storage engine and everything else of the
// servers, and the OpenTelemetry SDK and exporters (an instrumentation
// library depends on the OTel API only; the application picks the rest).
var serverSide = []string{
	"go.etcd.io/etcd/server/",
	"go.etcd.io/bbolt",
	"go.etcd.io/raft/",
	"github.com/sluice-io/sluice/libs/",
	"github.com/sluice-io/sluice/services/",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters/",
	"google.golang.org/grpc/reflection",
	"github.com/prometheus/",
}

func goTool(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
	}
	require.NoError(t, err)
	return out
}

func TestSDKLinksNoServerPackage(t *testing.T) {
	deps := strings.Fields(string(goTool(t, "list", "-deps", "github.com/sluice-io/sluice/libs/client/...")))
	require.NotEmpty(t, deps)
	var bad []string
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/sluice-io/sluice/libs/client") {
			continue
		}
		for _, s := range serverSide {
			if strings.HasPrefix(p, s) {
				bad = append(bad, p)
			}
		}
	}
	require.Empty(t, bad, "the SDK links server-side packages")
}

type goMod struct {
	Module  struct{ Path string }
	Require []struct{ Path string }
	Replace []struct{ Old struct{ Path string } }
}

func readGoMod(t *testing.T, path string) goMod {
	var m goMod
	require.NoError(t, json.Unmarshal(goTool(t, "mod", "edit", "-json", path), &m), path)
	return m
}

// The SDK module requires no server module, so `go get` of it downloads
// neither etcd's server nor the rest of Sluice; and no go.mod in the
// repository replaces anything (go.work wires the workspace), so each
// module resolves for an outside user as it does here.
func TestSDKModuleRequiresNoServerModule(t *testing.T) {
	sdk := readGoMod(t, "go.mod")
	require.Equal(t, "github.com/sluice-io/sluice/libs/client", sdk.Module.Path)
	for _, r := range sdk.Require {
		require.NotContains(t, r.Path, "etcd", "SDK module requires %s", r.Path)
		if strings.HasPrefix(r.Path, "github.com/sluice-io/sluice/") {
			require.Equal(t, "github.com/sluice-io/sluice/gen/go", r.Path, "the SDK may require only the generated API")
		}
	}

	root := filepath.Join("..", "..")
	var mods []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "bin" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			mods = append(mods, p)
		}
		return nil
	}))
	require.GreaterOrEqual(t, len(mods), 6)
	for _, p := range mods {
		require.Empty(t, readGoMod(t, p).Replace, "%s has replace directives; wire modules in go.work", p)
	}
}
