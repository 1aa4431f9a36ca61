package authz

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/sluice-io/sluice/libs/auth"
)

// Flags is the authorization configuration of a process (sluiced's
// --authz.* flags, Kafka's authorizer settings by their names).
type Flags struct {
	// Enabled turns ACL checks on (--authz.enabled).
	Enabled bool
	// SuperUsers is Kafka's super.users: principals separated by ';'
	// (--authz.super-users "User:admin;User:ops").
	SuperUsers string
	// AllowEveryoneIfNoACLFound is Kafka's allow.everyone.if.no.acl.found.
	AllowEveryoneIfNoACLFound bool
}

// RegisterFlags registers the --authz.* flags.
func (f *Flags) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&f.Enabled, "authz.enabled", false,
		"Check every client call against the cluster's ACLs (sluice acl). Off: every caller may do everything.")
	fs.StringVar(&f.SuperUsers, "authz.super-users", "",
		"Principals that may do everything whatever the ACLs say, separated by ';' (Kafka's super.users), such as \"User:admin;User:ops\".")
	fs.BoolVar(&f.AllowEveryoneIfNoACLFound, "authz.allow-everyone-if-no-acl-found", false,
		"Allow a request on a resource that no ACL names at all (Kafka's allow.everyone.if.no.acl.found). Once any ACL names the resource, only ACLs decide.")
}

// Validate checks the super users.
func (f *Flags) Validate() error {
	_, err := f.superUsers()
	if err == nil && !f.Enabled && (f.SuperUsers != "" || f.AllowEveryoneIfNoACLFound) {
		err = errors.New("authz.super-users and authz.allow-everyone-if-no-acl-found take effect only with --authz.enabled")
	}
	return err
}

func (f *Flags) superUsers() ([]string, error) {
	var out []string
	for _, s := range strings.Split(f.SuperUsers, ";") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := auth.ParsePrincipal(s)
		if err != nil || s == "*" || p.Name == "*" {
			return nil, fmt.Errorf("authz.super-users: %q is not a principal: want Type:Name such as User:admin, separated by ';'", s)
		}
		out = append(out, p.String())
	}
	return out, nil
}

// New returns the process's authorizer, or nil when authorization is off
// (service.Deps.Authz nil means off). Call Follow to feed it the cluster's
// ACLs.
func (f *Flags) New(logger *slog.Logger) *ACLAuthorizer {
	if !f.Enabled {
		return nil
	}
	users, err := f.superUsers()
	if err != nil {
		panic(err) // Validate refuses such flags before a process starts
	}
	return New(Config{SuperUsers: users, AllowEveryoneIfNoACLFound: f.AllowEveryoneIfNoACLFound, Logger: logger})
}
