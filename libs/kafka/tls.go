package kafka

import (
	"context"
	"crypto/tls"
	"log/slog"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/log"
)

// tlsConn is a server-side TLS connection: a *tls.Conn, or the buffered
// one of wire.BufferedTLSServer.
type tlsConn interface {
	HandshakeContext(ctx context.Context) error
	ConnectionState() tls.ConnectionState
}

// authenticate runs the TLS handshake of a TLS connection (bounded by the
// request timeout) and puts the connection's identity on its context: the
// principal of a verified client certificate (mechanism "mtls", with the
// roles its URI SANs name), else ANONYMOUS until SASL authenticates the
// connection. It reports false when the connection must close: the
// handshake failed (a plaintext client, an untrusted or expired
// certificate) or no mapping rule applies to the certificate.
func (c *conn) authenticate() bool {
	host := authn.HostOf(c.info.Remote)
	id := auth.Identity{Principal: auth.Anonymous, Host: host}
	if tc, ok := c.nc.(tlsConn); ok {
		if !c.armRead(c.s.cfg.RequestTimeout) {
			return false
		}
		if err := tc.HandshakeContext(c.ctx); err != nil {
			// Plaintext clients and untrusted certificates end here; the
			// client sees a closed connection or a TLS alert.
			c.logger.Info("Kafka TLS handshake failed, closing the connection", log.Err(err))
			return false
		}
		if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 && len(st.PeerCertificates) > 0 {
			var err error
			if id, err = c.s.authn.FromCertificate(host, st.PeerCertificates[0]); err != nil {
				c.logger.Info("Kafka client certificate refused, closing the connection", log.Err(err))
				return false
			}
			c.logger.Debug("Kafka client authenticated by certificate", slog.String("principal", id.Principal.String()))
		}
	}
	if id.Mechanism == "" && c.s.sasl == nil && c.s.authn.Require() {
		// --auth.require with no SASL on this listener: a client
		// certificate is the only way in.
		c.logger.Info("Kafka connection without a client certificate refused: authentication is required and SASL is off")
		return false
	}
	c.info.Principal = id.Principal.String()
	c.idCtx = auth.NewContext(c.ctx, id)
	return true
}
