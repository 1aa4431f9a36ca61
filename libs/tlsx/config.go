package tlsx

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
)

// ClientAuth says whether a TLS listener asks clients for a certificate.
type ClientAuth string

// Client authentication modes, as --tls.client-auth spells them.
const (
	// ClientAuthNone asks for no client certificate.
	ClientAuthNone ClientAuth = "none"
	// ClientAuthRequest asks for one and verifies it when given; clients
	// without one still connect (and authenticate otherwise, or are
	// anonymous).
	ClientAuthRequest ClientAuth = "request"
	// ClientAuthRequire refuses clients without a certificate the CA
	// signed.
	ClientAuthRequire ClientAuth = "require"
)

func (m ClientAuth) tlsType() tls.ClientAuthType {
	switch m {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	default:
		return tls.NoClientCert
	}
}

// Config is the TLS configuration of sluiced (--tls.* flags). With no
// certificate, every listener and connection stays plaintext.
type Config struct {
	// Cert and Key are the PEM files of this node's certificate (one URI
	// SAN per role it runs) and private key.
	Cert, Key string
	// CA is the PEM file of the CA that signs clients' and other nodes'
	// certificates.
	CA string
	// ClientAuth is none, request or require; empty means request when CA
	// is set, none otherwise.
	ClientAuth string
	// PrincipalMappingRules maps a client certificate's subject to a
	// principal name (Kafka's ssl.principal.mapping.rules).
	PrincipalMappingRules string
}

// RegisterFlags registers the --tls.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Cert, "tls.cert", "", "PEM file of this node's certificate; enables TLS on the gRPC, Kafka and etcd listeners and on connections to other nodes. Reloaded when it changes.")
	fs.StringVar(&c.Key, "tls.key", "", "PEM file of the private key of --tls.cert. Reloaded when it changes.")
	fs.StringVar(&c.CA, "tls.ca", "", "PEM file of the CA that signs client and node certificates. Reloaded when it changes.")
	fs.StringVar(&c.ClientAuth, "tls.client-auth", "", "Whether TLS listeners ask clients for a certificate: none, request or require (default request when --tls.ca is set, else none).")
	fs.StringVar(&c.PrincipalMappingRules, "tls.principal-mapping-rules", "DEFAULT",
		"Rules mapping a client certificate's subject to a principal name, in Kafka's ssl.principal.mapping.rules syntax: RULE:pattern/replacement/[LU],...,DEFAULT.")
}

// Enabled reports whether TLS is configured.
func (c *Config) Enabled() bool { return c.Cert != "" }

// Mode returns the effective client authentication mode.
func (c *Config) Mode() ClientAuth {
	switch {
	case c.ClientAuth != "":
		return ClientAuth(c.ClientAuth)
	case c.CA != "":
		return ClientAuthRequest
	default:
		return ClientAuthNone
	}
}

// Validate checks the flags together (the files are read by NewSource).
func (c *Config) Validate() error {
	var errs []error
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("tls.cert and tls.key go together: give both or neither"))
	}
	if !c.Enabled() && (c.CA != "" || c.ClientAuth != "") {
		errs = append(errs, errors.New("tls.ca and tls.client-auth need tls.cert and tls.key"))
	}
	switch m := c.Mode(); m {
	case ClientAuthNone, ClientAuthRequest, ClientAuthRequire:
		if m != ClientAuthNone && c.CA == "" {
			errs = append(errs, fmt.Errorf("tls.client-auth=%s needs tls.ca to verify client certificates", m))
		}
	default:
		errs = append(errs, fmt.Errorf("tls.client-auth: %q is not one of none, request, require", c.ClientAuth))
	}
	if _, err := ParseMappingRules(c.PrincipalMappingRules); err != nil {
		errs = append(errs, fmt.Errorf("tls.principal-mapping-rules: %w", err))
	}
	return errors.Join(errs...)
}
