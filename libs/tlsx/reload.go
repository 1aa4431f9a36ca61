package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of a node's TLS identity. CA may be empty: then
// peers are verified against the system roots and clients are not.
type Files struct {
	Cert, Key, CA string
}

type stamp struct {
	mod  time.Time
	size int64
}

// Source holds a certificate, its key and a CA pool loaded from files and
// reloads them when a file changes. Every TLS configuration it returns reads
// the newest ones at each handshake. It is safe for concurrent use.
type Source struct {
	files  Files
	logger *slog.Logger

	mu     sync.Mutex
	stamps [3]stamp
	cert   *tls.Certificate
	pool   *x509.CertPool
	// failed is the stamps of a set of files that did not load, so a broken
	// file is reported once, not at every handshake.
	failed [3]stamp
}

// NewSource loads the files; it fails if they do not form a valid identity.
func NewSource(f Files, logger *slog.Logger) (*Source, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("TLS needs a certificate and a key file")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: f, logger: logger}
	st := s.stat()
	if err := s.load(st); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Source) paths() [3]string { return [3]string{s.files.Cert, s.files.Key, s.files.CA} }

func (s *Source) stat() [3]stamp {
	var out [3]stamp
	for i, p := range s.paths() {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			out[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
		}
	}
	return out
}

// load reads the files and, if they form a valid identity, installs it.
func (s *Source) load(st [3]stamp) error {
	kp, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("loading TLS certificate %s and key %s: %w", s.files.Cert, s.files.Key, err)
	}
	var pool *x509.CertPool
	if s.files.CA != "" {
		pem, err := os.ReadFile(s.files.CA)
		if err != nil {
			return fmt.Errorf("reading TLS CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS CA %s holds no PEM certificate", s.files.CA)
		}
	}
	s.cert, s.pool, s.stamps = &kp, pool, st
	return nil
}

// current returns the newest valid certificate and pool, reloading them if a
// file changed since the last load. A change that does not load (a file
// half written, a key that does not match) keeps the previous identity and
// is logged once; the next change is tried again.
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	st := s.stat()
	s.mu.Lock()
	defer s.mu.Unlock()
	if st != s.stamps && st != s.failed {
		if err := s.load(st); err != nil {
			s.failed = st
			s.logger.Warn("TLS files changed but do not load; keeping the previous certificate", slog.Any("error", err))
		} else {
			s.logger.Info("TLS certificate reloaded", slog.String("cert", s.files.Cert))
		}
	}
	return s.cert, s.pool
}

// Certificate returns the current certificate (reloaded if its files
// changed).
func (s *Source) Certificate() *tls.Certificate {
	c, _ := s.current()
	return c
}

// ServerConfig returns a listener configuration that presents the current
// certificate and verifies client certificates against the current CA as
// mode says. nextProtos are the ALPN protocols (gRPC needs "h2").
func (s *Source) ServerConfig(mode ClientAuth, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   mode.tlsType(),
			}, nil
		},
	}
}

// ClientConfig returns a configuration for connections to other nodes: it
// presents the current certificate as client certificate and verifies the
// server's certificate and host name against the current CA (the system
// roots when there is no CA file).
func (s *Source) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.Certificate(), nil
		},
		// The CA pool can change between handshakes, and tls.Config has no
		// callback for the roots: verification is done in VerifyConnection
		// against the pool of the moment, with the same checks crypto/tls
		// would make.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool := s.current()
			return verifyServer(cs, pool)
		},
	}
}

func verifyServer(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		DNSName:       cs.ServerName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tls: verifying the server's certificate: %w", err)
	}
	return nil
}
