package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// defaultClientConfig is where `sluice dev` (with its default --data-dir)
// writes the client configuration of the cluster it runs; SLUICE_CONFIG
// names another file.
const defaultClientConfig = "data/dev/client.conf"

// clientConfigKeys are the keys a client configuration file may set, each
// the name of the global flag it gives a value to.
var clientConfigKeys = []string{"bootstrap", "tls-ca", "tls-cert", "tls-key"}

// applyClientConfig gives the global flags the command line did not set the
// values of the client configuration file: $SLUICE_CONFIG, else
// data/dev/client.conf when it exists. The command line and SLUICE_BOOTSTRAP
// win over the file.
func applyClientConfig(cmd *cobra.Command) error {
	path, explicit := os.LookupEnv("SLUICE_CONFIG")
	if !explicit {
		path = defaultClientConfig
	}
	if path == "" {
		return nil
	}
	kv, err := readClientConfig(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return err
	}
	flags := cmd.Flags()
	for _, key := range clientConfigKeys {
		v, ok := kv[key]
		if !ok || flags.Changed(key) || (key == "bootstrap" && os.Getenv("SLUICE_BOOTSTRAP") != "") {
			continue
		}
		if err := flags.Set(key, v); err != nil {
			return fmt.Errorf("client config %s: %s: %w", path, key, err)
		}
	}
	return nil
}

// readClientConfig reads key=value lines ('#' starts a comment).
func readClientConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		known := false
		for _, key := range clientConfigKeys {
			known = known || key == k
		}
		if !ok || !known {
			return nil, fmt.Errorf("client config %s line %d: want key=value with key one of %s", path, n, strings.Join(clientConfigKeys, ", "))
		}
		kv[k] = v
	}
	return kv, sc.Err()
}

// writeClientConfig writes the configuration a client of a dev cluster
// needs; relative file names are made absolute.
func writeClientConfig(path string, kv map[string]string) error {
	var b strings.Builder
	b.WriteString("# Written by `sluice dev`: the sluice CLI reads it from data/dev/client.conf or $SLUICE_CONFIG.\n")
	for _, key := range clientConfigKeys {
		v, ok := kv[key]
		if !ok {
			continue
		}
		if key != "bootstrap" && v != "" && !filepath.IsAbs(v) {
			if abs, err := filepath.Abs(v); err == nil {
				v = abs
			}
		}
		fmt.Fprintf(&b, "%s=%s\n", key, v)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing client config: %w", err)
	}
	return nil
}
