package kafka

import "github.com/sluice-io/sluice/libs/client/errs"

// ErrorCode is the Kafka error code to answer err with: the catalog's
// number where Kafka has the error, and 0 for nil. An error only Sluice has
// (node not ready or unreachable, no controller quorum) is REQUEST_TIMED_OUT
// when retriable, which every Kafka client retries, and
// UNKNOWN_SERVER_ERROR (-1) otherwise.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	e := errs.Lookup(errs.CodeOf(err))
	if e.Kafka == -1 && e.Retriable {
		return errs.Lookup(errs.RequestTimedOut).Kafka
	}
	return e.Kafka
}

// ErrorMessage is the message to put in a response's error message field,
// nil for nil.
func ErrorMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
