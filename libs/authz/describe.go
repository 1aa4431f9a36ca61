package authz

import "context"

// DescribeTopic returns the topic check of a metadata server
// (metadata.Server.DescribeTopic): Describe on the topic, audited when the
// caller named the topic, silent when a listing leaves it out. Nil when a
// is nil or disabled, so a process without authorization pays nothing.
func DescribeTopic(a Authorizer) func(ctx context.Context, topic string, listing bool) error {
	if a == nil || !a.Enabled() {
		return nil
	}
	return func(ctx context.Context, topic string, listing bool) error {
		if listing {
			if Allowed(ctx, a, Describe, Topic, topic) {
				return nil
			}
			return Denied(identityOf(ctx), Describe, Topic, topic)
		}
		return Check(ctx, a, Describe, Topic, topic)
	}
}
