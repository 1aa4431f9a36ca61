package kafka

import "github.com/sluice-io/sluice/libs/client/errs"

// ErrorCode is the Kafka error code to answer err with: the catalog's
// number where Kafka has the error, UNKNOWN_SERVER_ERROR (-1) otherwise,
// and 0 for nil.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	return errs.Lookup(errs.CodeOf(err)).Kafka
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
