package devcluster

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// DevMappingRules map a certificate whose subject starts with CN=<name> to
// the principal User:<name>, so the dev cluster's admin certificate is
// User:admin and a node's is User:<process name>.
const DevMappingRules = `RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT`

// TLSFiles are the files of a TLS cluster's throw-away CA and of the
// admin client certificate.
type TLSFiles struct {
	// Dir holds every file: ca.crt, ca.key, <process>.crt/.key,
	// admin.crt/.key.
	Dir                   string
	CA, CAKey             string
	ClientCert, ClientKey string
}

// ClientTLS returns the configuration of a client trusting the cluster's CA
// and presenting the admin certificate.
func (f *TLSFiles) ClientTLS() (*tls.Config, error) {
	return wire.ClientTLS(f.CA, f.ClientCert, f.ClientKey)
}

// setupTLS writes (or reuses) the CA under dir/tls and issues a certificate
// for each process (its roles as URI SANs, its host as SAN) and one for
// the admin client (CN=admin).
func (c *Cluster) setupTLS(dir string, hosts func(k int) string) error {
	tdir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return fmt.Errorf("creating TLS dir: %w", err)
	}
	f := &TLSFiles{Dir: tdir, CA: filepath.Join(tdir, "ca.crt"), CAKey: filepath.Join(tdir, "ca.key")}
	ca, err := tlsx.LoadCA(f.CA, f.CAKey)
	if errors.Is(err, os.ErrNotExist) {
		if ca, err = tlsx.NewCA("Sluice dev CA", 365*24*time.Hour); err == nil {
			var pair tlsx.Pair
			if pair, err = ca.Pair(); err == nil {
				_, _, err = pair.WriteFiles(tdir, "ca")
			}
		}
	}
	if err != nil {
		return fmt.Errorf("dev cluster CA: %w", err)
	}
	issue := func(name string, nodeID int32, roles []string, hosts ...string) (string, string, error) {
		pair, err := ca.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: name, Organization: []string{"Sluice dev"}},
			Roles: roles, Hosts: hosts, NodeID: nodeID, Validity: 365 * 24 * time.Hour})
		if err != nil {
			return "", "", fmt.Errorf("issuing %s's certificate: %w", name, err)
		}
		return pair.WriteFiles(tdir, name)
	}
	if f.ClientCert, f.ClientKey, err = issue("admin", 0, nil); err != nil {
		return err
	}
	for _, p := range c.procs {
		// Bound to the node id: it registers as this node only.
		cert, key, err := issue(p.Name, p.NodeID, p.Roles.Strings(), hosts(p.index), "localhost", "127.0.0.1", "::1")
		if err != nil {
			return err
		}
		p.Args = append(p.Args, "--tls.cert="+cert, "--tls.key="+key, "--tls.ca="+f.CA,
			"--tls.principal-mapping-rules="+DevMappingRules)
	}
	c.tls = f
	if c.clientTLS, err = f.ClientTLS(); err != nil {
		return err
	}
	return nil
}

// TLS returns the cluster's TLS files, nil for a plaintext cluster.
func (c *Cluster) TLS() *TLSFiles { return c.tls }
