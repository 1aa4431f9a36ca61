// Package tlsx builds the TLS configurations of Sluice's listeners and of
// its role-to-role connections from PEM files, and reloads them when the
// files change: every new handshake reads the newest certificate, key and
// CA, so rotating certificates needs no restart (connections already open
// keep the certificate they were made with).
//
// It also reads who a certificate names: RolesOf returns the Sluice roles
// in its URI SANs (sluice://role/<role>), and MappingRules turns its subject
// into a principal with Kafka's ssl.principal.mapping.rules syntax. The
// generation helpers (NewCA, CA.Issue) make the ECDSA P-256 certificates
// `sluice certs` and `sluice dev --tls` write.
//
//	src, err := tlsx.NewSource(tlsx.Files{Cert: "node.crt", Key: "node.key", CA: "ca.crt"}, logger)
//	if err != nil { ... }
//	lis = tls.NewListener(lis, src.ServerConfig(tlsx.ClientAuthRequest))
package tlsx
