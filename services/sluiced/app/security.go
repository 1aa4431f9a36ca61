package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// security is what the --tls.* and --auth.* flags give a process: the
// reloading certificate source (nil without TLS) and the authenticator of
// both listeners.
type security struct {
	src   *tlsx.Source
	mode  tlsx.ClientAuth
	authn *authn.Authenticator
}

// setupSecurity loads the TLS files (failing at start on a bad one) and,
// with TLS, points the embedded etcd member at the same files.
func setupSecurity(cfg *Config, logger *slog.Logger) (*security, error) {
	rules, err := tlsx.ParseMappingRules(cfg.TLS.PrincipalMappingRules)
	if err != nil {
		return nil, fmt.Errorf("tls.principal-mapping-rules: %w", err)
	}
	sec := &security{mode: cfg.TLS.Mode()}
	if cfg.TLS.Enabled() {
		files := tlsx.Files{Cert: cfg.TLS.Cert, Key: cfg.TLS.Key, CA: cfg.TLS.CA}
		if sec.src, err = tlsx.NewSource(files, logger); err != nil {
			return nil, err
		}
		cfg.Controller.Etcd.TLS = &metastore.TLS{CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA, Client: sec.src.ClientConfig()}
	}
	sec.authn = authn.New(authn.Options{Rules: rules, Require: cfg.Auth.Require, Logger: logger})
	return sec, nil
}

// serverTLS is the listeners' configuration, nil without TLS.
func (s *security) serverTLS(nextProtos ...string) *tls.Config {
	if s.src == nil {
		return nil
	}
	return s.src.ServerConfig(s.mode, nextProtos...)
}

// clientTLS is the configuration of connections to other nodes, nil
// without TLS.
func (s *security) clientTLS() *tls.Config {
	if s.src == nil {
		return nil
	}
	return s.src.ClientConfig()
}
