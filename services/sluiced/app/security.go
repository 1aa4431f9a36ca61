package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"

	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/scram"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// security is what the --tls.* and --auth.* flags give a process: the
// reloading certificate source (nil without TLS) and the authenticator of
// both listeners.
type security struct {
	src   *tlsx.Source
	mode  tlsx.ClientAuth
	authn *authn.Authenticator
	// scram holds users' SCRAM credentials from the metadata image;
	// passwords checks passwords against them (gRPC per-call credentials,
	// Kafka SASL/PLAIN).
	scram     *scram.Store
	passwords *scram.Verifier
	// limiter refuses user names and addresses after too many failed
	// password authentications, on both listeners together.
	limiter *authn.Limiter
	logger  *slog.Logger
}

// setupSecurity loads the TLS files (failing at start on a bad one) and,
// with TLS, points the embedded etcd member at the same files.
func setupSecurity(cfg *Config, cache *metadata.Cache, logger *slog.Logger) (*security, error) {
	rules, err := tlsx.ParseMappingRules(cfg.TLS.PrincipalMappingRules)
	if err != nil {
		return nil, fmt.Errorf("tls.principal-mapping-rules: %w", err)
	}
	store := scram.NewStore(cache)
	sec := &security{mode: cfg.TLS.Mode(), scram: store, passwords: scram.NewVerifier(store, 0),
		limiter: authn.NewLimiter(cfg.AuthLimit, nil), logger: logger}
	if cfg.TLS.Enabled() {
		files := tlsx.Files{Cert: cfg.TLS.Cert, Key: cfg.TLS.Key, CA: cfg.TLS.CA}
		if sec.src, err = tlsx.NewSource(files, logger); err != nil {
			return nil, err
		}
		cfg.Controller.Etcd.TLS = &metastore.TLS{CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA, Client: sec.src.ClientConfig()}
	}
	sec.authn = authn.New(authn.Options{Rules: rules, Require: cfg.Auth.Require,
		Passwords: authn.LimitPasswords(sec.passwords, sec.limiter), Logger: logger})
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

// kafkaSASL is the Kafka listener's SASL configuration, nil without
// --kafka.sasl.mechanisms.
func (s *security) kafkaSASL(cfg kafka.Config) *kafka.SASLOptions {
	ms := cfg.Mechanisms()
	if len(ms) == 0 {
		return nil
	}
	if s.src == nil && slices.Contains(ms, kafka.MechanismPlain) {
		// Only with --kafka.sasl.allow-plain-without-tls: Validate
		// refuses it otherwise.
		s.logger.Warn("SASL/PLAIN on a Kafka listener without TLS sends passwords in clear text (--kafka.sasl.allow-plain-without-tls)")
	}
	return &kafka.SASLOptions{Mechanisms: ms, Credentials: s.scram, Passwords: s.passwords,
		SessionLifetime: cfg.SASLSessionLifetime, Limiter: s.limiter}
}
