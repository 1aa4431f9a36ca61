package tlsx

import (
	"crypto/x509"
	"net/url"
	"strings"
)

// roleURIPrefix begins the URI SAN that names a Sluice role in a
// certificate: sluice://role/<role>.
const roleURIPrefix = "sluice://role/"

// RoleURI returns the URI SAN naming role.
func RoleURI(role string) *url.URL {
	return &url.URL{Scheme: "sluice", Host: "role", Path: "/" + role}
}

// RolesOf returns the Sluice roles a certificate names in its URI SANs, in
// the certificate's order; none for a client certificate.
func RolesOf(cert *x509.Certificate) []string {
	if cert == nil {
		return nil
	}
	var roles []string
	for _, u := range cert.URIs {
		if r, ok := strings.CutPrefix(u.String(), roleURIPrefix); ok && r != "" && !strings.Contains(r, "/") {
			roles = append(roles, r)
		}
	}
	return roles
}
