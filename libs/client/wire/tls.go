package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ClientTLS builds a client TLS configuration from PEM files: caFile is the
// CA that signed the servers' certificates (empty trusts the system roots),
// certFile and keyFile are the client certificate and key for mutual TLS
// (both or neither). The files are read once; servers reload theirs, a
// client that must follow a rotated client certificate builds a new Client.
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("TLS client certificate and key go together: give both or neither")
	}
	if certFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}
