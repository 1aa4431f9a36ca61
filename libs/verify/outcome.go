package verify

import (
	"errors"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/verify/check"
)

// definite are the error codes that prove an operation took no effect: the
// SDK or the server refused the request as malformed or not allowed before
// anything was written, and nothing of it can have been applied by an
// earlier attempt either, because a request with these problems is refused
// on every attempt. Everything else a client may see after a request left
// (a timeout, an unreachable node, NOT_LEADER after a retry whose first
// attempt timed out) leaves the outcome unknown.
var definite = map[errs.Code]bool{
	errs.InvalidRequest:             true,
	errs.InvalidConfig:              true,
	errs.InvalidTopic:               true,
	errs.MessageTooLarge:            true,
	errs.InvalidRecord:              true,
	errs.InvalidRequiredAcks:        true,
	errs.InvalidTransactionTimeout:  true,
	errs.InvalidProducerIDMapping:   true,
	errs.UnsupportedCompressionType: true,
	errs.TopicAuthorizationFailed:   true,
	errs.ClusterAuthorizationFailed: true,
	errs.GroupAuthorizationFailed:   true,
	// The SDK's own state checks (no open transaction, the transaction must
	// be aborted, a record failed because its transaction was aborted
	// before it was sent): nothing went out.
	errs.InvalidTxnState: true,
}

// outcomeOf classifies the error an operation ended with: OK for nil, Fail
// only when the operation certainly took no effect, Info otherwise. A fenced
// transactional producer (PRODUCER_FENCED) counts as Info too: the SDK
// retries EndTxn, and a commit whose first attempt timed out may have
// completed before a retry was fenced.
func outcomeOf(err error) check.Outcome {
	switch {
	case err == nil:
		return check.OK
	case errors.Is(err, client.ErrProducerClosed):
		return check.Fail
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		// A context error, a transport error or anything else without a
		// Sluice code: the request may have been applied.
		return check.Info
	}
	if definite[e.Code] {
		return check.Fail
	}
	return check.Info
}
