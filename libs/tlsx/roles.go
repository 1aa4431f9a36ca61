package tlsx

import (
	"crypto/x509"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// roleURIPrefix begins the URI SAN that names a Sluice role in a
// certificate: sluice://role/<role>.
const roleURIPrefix = "sluice://role/"

// RoleURI returns the URI SAN naming role.
func RoleURI(role string) *url.URL {
	return &url.URL{Scheme: "sluice", Host: "role", Path: "/" + role}
}

// roleDNSSuffix ends the DNS SAN that also names a role in a node
// certificate. ".invalid" is reserved (RFC 6761): no real host has it, so
// no public CA issues it and no client dials it.
const roleDNSSuffix = ".role.sluice.invalid"

// RoleDNSName returns the DNS SAN that names role in a node certificate
// besides its URI SAN: "controller.role.sluice.invalid". Software that
// checks certificates only by host name, such as etcd's AllowedHostnames,
// can require a role this way.
func RoleDNSName(role string) string { return role + roleDNSSuffix }

// HasRoleDNSName reports whether cert names role by its DNS SAN
// (RoleDNSName).
func HasRoleDNSName(cert *x509.Certificate, role string) bool {
	return cert != nil && slices.Contains(cert.DNSNames, RoleDNSName(role))
}

// nodeURIPrefix begins the URI SAN that binds a node certificate to a
// node id: sluice://node/<id>.
const nodeURIPrefix = "sluice://node/"

// NodeURI returns the URI SAN binding a certificate to node id.
func NodeURI(id int32) *url.URL {
	return &url.URL{Scheme: "sluice", Host: "node", Path: "/" + strconv.Itoa(int(id))}
}

// NodeIDOf returns the node id a certificate's URI SAN binds it to, and
// false when it names none (or more than one, which binds it to none).
func NodeIDOf(cert *x509.Certificate) (int32, bool) {
	if cert == nil {
		return 0, false
	}
	var id int32
	found := false
	for _, u := range cert.URIs {
		s, ok := strings.CutPrefix(u.String(), nodeURIPrefix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n <= 0 || (found && int32(n) != id) {
			return 0, false
		}
		id, found = int32(n), true
	}
	return id, found
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
