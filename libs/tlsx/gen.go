package tlsx

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority whose key is held in memory: enough for
// `sluice certs` and test clusters. Production CAs keep their keys in an HSM
// or a secrets manager, and issue with their own tools.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed ECDSA P-256 CA valid for validity from now.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA certificate and its key (as WriteFiles writes them).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("CA certificate or key file holds no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing CA key (want an EC private key): %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue describes a certificate to issue.
type Issue struct {
	// Subject is the certificate's subject; principal mapping rules read it.
	Subject pkix.Name
	// Roles are the Sluice roles of a node certificate (URI SANs
	// sluice://role/<role>); none for a client certificate.
	Roles []string
	// Hosts are the DNS names and IP addresses a node is reached at.
	Hosts []string
	// NodeID, when positive, binds a node certificate to that node id
	// (URI SAN sluice://node/<id>): the controller lets it register and
	// heartbeat as that node only.
	NodeID int32
	// Validity is how long the certificate is valid from now. NotBefore
	// and NotAfter, when set, override it (tests make expired ones).
	Validity            time.Duration
	NotBefore, NotAfter time.Time
}

// Pair is an issued certificate and its key, in PEM.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a new ECDSA P-256 certificate usable both for serving and as
// a client certificate (nodes are both).
func (ca *CA) Issue(o Issue) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generating key: %w", err)
	}
	notBefore, notAfter := o.NotBefore, o.NotAfter
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Minute)
	}
	if notAfter.IsZero() {
		if o.Validity <= 0 {
			return Pair{}, errors.New("certificate validity must be positive")
		}
		notAfter = time.Now().Add(o.Validity)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      o.Subject,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	for _, r := range o.Roles {
		tmpl.URIs = append(tmpl.URIs, RoleURI(r))
		// The same role as a DNS name, for etcd's AllowedHostnames.
		tmpl.DNSNames = append(tmpl.DNSNames, RoleDNSName(r))
	}
	if o.NodeID > 0 {
		tmpl.URIs = append(tmpl.URIs, NodeURI(o.NodeID))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Pair{}, fmt.Errorf("signing certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Pair returns the CA's own certificate and key in PEM.
func (ca *CA) Pair() (Pair, error) {
	keyDER, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// WriteFiles writes dir/name.crt (mode 0644) and dir/name.key (mode 0600).
// Each file is written to a temporary name and renamed, so a process
// reloading them never reads half a file.
func (p Pair) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writeAtomic(keyFile, p.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeAtomic(certFile, p.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // crypto/rand does not fail on Linux
	}
	return n
}
