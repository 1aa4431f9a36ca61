package authz

import (
	"context"
	"log/slog"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Check authorizes the caller in ctx (auth.FromContext; a context without
// an identity is User:ANONYMOUS from no host) to perform op on the resource
// (rt, name). It returns nil when a allows it, else the resource type's
// authorization error (TOPIC_, GROUP_, CLUSTER_ or
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED) naming the principal, the
// operation and the resource, after writing an audit line for the denial.
func Check(ctx context.Context, a Authorizer, op Operation, rt ResourceType, name string) error {
	if a == nil || !a.Enabled() {
		return nil
	}
	id := identityOf(ctx)
	if a.Authorize(ctx, id, op, rt, name) {
		// A guarded stream decides it again when the ACLs change.
		record(ctx, op, rt, name)
		return nil
	}
	audit(ctx, a, id, op, rt, name, false)
	return Denied(id, op, rt, name)
}

// Denied returns the error Check returns when id may not perform op on
// (rt, name).
func Denied(id auth.Identity, op Operation, rt ResourceType, name string) *errs.Error {
	code := errs.ClusterAuthorizationFailed
	switch rt {
	case Topic:
		code = errs.TopicAuthorizationFailed
	case Group:
		code = errs.GroupAuthorizationFailed
	case TransactionalID:
		code = errs.TransactionalIDAuthorizationFailed
	}
	from := ""
	if id.Host != "" {
		from = " from host " + id.Host
	}
	return errs.New(code, "%s may not %s %s %q%s; an administrator can grant it with an ACL (sluice acl create --allow-principal %s --operation %s ...)",
		id.Principal, op, rt, name, from, id.Principal, op)
}

// FilterAllowed returns the names the caller in ctx may perform op on
// (usually Describe), keeping their order. Filtered-out names are not
// audited: listing what one may see is not a denied request. With
// authorization off it returns names.
func FilterAllowed(ctx context.Context, a Authorizer, op Operation, rt ResourceType, names []string) []string {
	return FilterAllowedFunc(ctx, a, op, rt, names, func(s string) string { return s })
}

// FilterAllowedFunc is FilterAllowed over any items; name gives an item's
// resource name.
func FilterAllowedFunc[T any](ctx context.Context, a Authorizer, op Operation, rt ResourceType, items []T, name func(T) string) []T {
	if a == nil || !a.Enabled() {
		return items
	}
	id := identityOf(ctx)
	out := make([]T, 0, len(items))
	for _, it := range items {
		if a.Authorize(ctx, id, op, rt, name(it)) {
			out = append(out, it)
		}
	}
	return out
}

// Allowed is Check without the error and the audit line: whether the
// caller in ctx may perform op on (rt, name). For decisions that are not
// refusals (Kafka's authorized-operations bits, "topic exists?" answers).
func Allowed(ctx context.Context, a Authorizer, op Operation, rt ResourceType, name string) bool {
	if a == nil || !a.Enabled() {
		return true
	}
	return a.Authorize(ctx, identityOf(ctx), op, rt, name)
}

func identityOf(ctx context.Context) auth.Identity {
	id, ok := auth.FromContext(ctx)
	if !ok || id.Principal.IsZero() {
		id.Principal = auth.Anonymous
	}
	return id
}

// Auditor is implemented by authorizers that write audit lines (the
// ACLAuthorizer does, to its Config.Logger).
type Auditor interface {
	// Audit records one decision.
	Audit(ctx context.Context, id auth.Identity, op Operation, rt ResourceType, name string, allowed bool)
}

func audit(ctx context.Context, a Authorizer, id auth.Identity, op Operation, rt ResourceType, name string, allowed bool) {
	if au, ok := a.(Auditor); ok {
		au.Audit(ctx, id, op, rt, name, allowed)
	}
}

// Audit implements Auditor: one line per decision, message "authorization"
// with an "audit" group (principal, host, operation, resource, decision).
func (a *ACLAuthorizer) Audit(ctx context.Context, id auth.Identity, op Operation, rt ResourceType, name string, allowed bool) {
	AuditLine(ctx, a.logger, "authorization", id, op.String(), rt.String()+":"+name, allowed)
}

// AuditLine writes one audit line to logger: msg with an "audit" group of
// principal, host, role (when set), operation, resource and decision
// ("allow" or "deny"). Denials log at Warn, allowed actions at Info. The
// controller uses it for ACL changes too.
func AuditLine(ctx context.Context, logger *slog.Logger, msg string, id auth.Identity, operation, resource string, allowed bool) {
	if logger == nil {
		return
	}
	decision, level := "deny", slog.LevelWarn
	if allowed {
		decision, level = "allow", slog.LevelInfo
	}
	attrs := []any{
		slog.String("principal", id.Principal.String()),
		slog.String("host", id.Host),
	}
	if id.Role != "" {
		attrs = append(attrs, slog.String("role", id.Role))
	}
	attrs = append(attrs,
		slog.String("operation", operation),
		slog.String("resource", resource),
		slog.String("decision", decision))
	logger.Log(ctx, level, msg, slog.Group("audit", attrs...))
}
