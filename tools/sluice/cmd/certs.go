package cmd

import (
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/tlsx"
)

type certsOptions struct {
	dir     string
	nodes   []string
	clients []string
	days    int
}

func newCertsCmd() *cobra.Command {
	o := &certsOptions{}
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Write a CA and node and client certificates for a TLS cluster",
		Long: `Write ECDSA P-256 certificates into a directory: the CA (ca.crt, ca.key; made on
first use, reused afterwards), one certificate per node with its roles as URI
SANs (sluice://role/<role>) and its host names, and client certificates whose
subject is CN=<name>.

  sluice certs --dir certs --node controller-1:controller:10.0.0.1,ctl1.example \
    --node storage-1:storage-node,replication,group-coordinator,transaction-coordinator:10.0.0.2 \
    --client admin --client alice

Then run each node with --tls.cert=certs/<name>.crt --tls.key=certs/<name>.key
--tls.ca=certs/ca.crt, and clients with --tls-ca, --tls-cert, --tls-key.

The CA key is written to disk unencrypted: this is for development and small
deployments. A production CA keeps its key offline or in a secrets manager.`,
		Example: `  sluice certs --dir certs --node n1:all:127.0.0.1 --client admin`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCerts(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "certs", "Directory to write the certificates to.")
	f.StringArrayVar(&o.nodes, "node", nil, "A node certificate, NAME:ROLES:HOSTS (ROLES comma-separated or all; HOSTS comma-separated DNS names and IPs); repeatable.")
	f.StringArrayVar(&o.clients, "client", nil, "A client certificate with subject CN=NAME; repeatable.")
	f.IntVar(&o.days, "days", 365, "Validity of the issued certificates, in days (the CA gets ten times as long).")
	return cmd
}

func runCerts(out io.Writer, o *certsOptions) error {
	if o.days <= 0 {
		return fmt.Errorf("--days must be positive, got %d", o.days)
	}
	if len(o.nodes) == 0 && len(o.clients) == 0 {
		return errors.New("nothing to issue: give at least one --node or --client")
	}
	type nodeSpec struct {
		name         string
		roles, hosts []string
	}
	var nodes []nodeSpec
	for _, n := range o.nodes {
		parts := strings.SplitN(n, ":", 3)
		if len(parts) != 3 || !validName(parts[0]) || parts[2] == "" {
			return fmt.Errorf("--node %q: want NAME:ROLES:HOSTS, such as n1:controller,storage-node:127.0.0.1,localhost", n)
		}
		var rs role.Set
		if err := rs.Set(parts[1]); err != nil {
			return fmt.Errorf("--node %q: %w", n, err)
		}
		nodes = append(nodes, nodeSpec{name: parts[0], roles: rs.Strings(), hosts: strings.Split(parts[2], ",")})
	}
	for _, c := range o.clients {
		if !validName(c) {
			return fmt.Errorf("--client %q: a name of letters, digits, '-', '_' and '.'", c)
		}
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", o.dir, err)
	}
	validity := time.Duration(o.days) * 24 * time.Hour
	caCert, caKey := filepath.Join(o.dir, "ca.crt"), filepath.Join(o.dir, "ca.key")
	ca, err := tlsx.LoadCA(caCert, caKey)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if ca, err = tlsx.NewCA("Sluice CA", 10*validity); err != nil {
			return err
		}
		pair, err := ca.Pair()
		if err != nil {
			return err
		}
		if _, _, err := pair.WriteFiles(o.dir, "ca"); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote CA %s (key %s)\n", caCert, caKey)
	case err != nil:
		return err
	default:
		fmt.Fprintf(out, "using CA %s\n", caCert)
	}
	issue := func(name string, roles, hosts []string) error {
		pair, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: name}, Roles: roles, Hosts: hosts, Validity: validity})
		if err != nil {
			return err
		}
		cert, key, err := pair.WriteFiles(o.dir, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s (key %s)\n", cert, key)
		return nil
	}
	for _, n := range nodes {
		if err := issue(n.name, n.roles, n.hosts); err != nil {
			return err
		}
	}
	for _, c := range o.clients {
		if err := issue(c, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

func validName(s string) bool {
	if s == "" || s == "ca" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
