// Package authn authenticates gRPC callers: it builds the auth.Identity of
// every call from the verified client certificate of the connection (mTLS),
// else from per-call password credentials checked by a PasswordVerifier,
// else the anonymous principal, and puts it in the call's context for the
// authorizer and the audit log.
package authn

import "context"

// PasswordVerifier checks a user's password against the credentials the
// process holds (SCRAM credentials from the metadata quorum). It is used for
// gRPC per-call credentials and for SASL/PLAIN on the Kafka listener.
//
// Verify returns nil when the password is right. Any error means the caller
// is refused; the error text is logged, never sent to the caller, so it may
// name the reason (unknown user, wrong password). Implementations must be
// safe for concurrent use and should compare secrets in constant time.
type PasswordVerifier interface {
	Verify(ctx context.Context, user, password string) error
}

// PasswordVerifierFunc adapts a function to a PasswordVerifier.
type PasswordVerifierFunc func(ctx context.Context, user, password string) error

// Verify calls f.
func (f PasswordVerifierFunc) Verify(ctx context.Context, user, password string) error {
	return f(ctx, user, password)
}
