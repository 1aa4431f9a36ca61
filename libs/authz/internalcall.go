package authz

import (
	"context"
	"strings"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// CheckInternal authorizes a call between Sluice roles (broker
// registration and heartbeats, ISR changes, follower fetches, transaction
// markers, replication, coordinator-internal calls). A caller whose
// certificate names Sluice roles (auth.Identity.Role, comma-separated when
// it names several) must hold one of roles, the roles that make this call,
// so a storage node's certificate cannot make a controller-only write; any
// other caller must be a super user or hold an explicit Allow ACL for
// ClusterAction on the cluster, as Kafka's inter-broker requests need.
// Unlike Kafka, allow.everyone.if.no.acl.found never grants it: with that
// default on and no ACL on the cluster, a client certificate or an
// anonymous caller could otherwise register as a node, change ISRs or
// read every credential. rpc names the call in the refusal. With
// authorization off it returns nil and allocates nothing.
func CheckInternal(ctx context.Context, a Authorizer, rpc string, roles ...string) error {
	if a == nil || !a.Enabled() {
		return nil
	}
	id, _ := auth.FromContext(ctx)
	if id.Role == "" {
		id = identityOf(ctx)
		if a.AuthorizeExplicit(ctx, id, ClusterAction, Cluster, ClusterName) {
			// A guarded stream decides it again, by the same rule, when
			// the ACLs change.
			recordDecision(ctx, ClusterAction, Cluster, ClusterName, true)
			return nil
		}
		audit(ctx, a, id, ClusterAction, Cluster, ClusterName, false)
		return errs.New(errs.ClusterAuthorizationFailed,
			"%s may not call %s: it is made by the %s role; other callers need a role certificate, super-user status or an explicit ACL (sluice acl create --allow-principal %s --operation ClusterAction --cluster)",
			id.Principal, rpc, strings.Join(roles, " or "), id.Principal)
	}
	if hasRole(id.Role, roles) {
		return nil
	}
	audit(ctx, a, id, ClusterAction, Cluster, ClusterName, false)
	return errs.New(errs.ClusterAuthorizationFailed,
		"%s (certificate of role %s) may not call %s: only the %s role calls it",
		id.Principal, id.Role, rpc, strings.Join(roles, " or "))
}

// hasRole reports whether one of the caller's roles is among want.
func hasRole(have string, want []string) bool {
	for r := range strings.SplitSeq(have, ",") {
		r = strings.TrimSpace(r)
		for _, w := range want {
			if r == w {
				return true
			}
		}
	}
	return false
}
