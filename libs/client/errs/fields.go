package errs

import (
	"fmt"
	"strings"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
)

// Fields collects every invalid field of a request, so a caller learns about
// all of them at once.
//
//	var f errs.Fields
//	if r.GetTimeoutMs() < 0 {
//		f.Add("timeout_ms", "must not be negative, got %d", r.GetTimeoutMs())
//	}
//	return f.Err()
type Fields struct {
	list  []*edpb.FieldViolation
	codes map[Code]bool
}

// Add records one invalid field.
func (f *Fields) Add(field, format string, args ...any) {
	f.AddCode(InvalidRequest, field, format, args...)
}

// AddCode records one invalid field with a specific code (such as
// InvalidTopic or InvalidPartitions). If every violation has the same code,
// Err uses it; otherwise INVALID_REQUEST.
func (f *Fields) AddCode(code Code, field, format string, args ...any) {
	if f.codes == nil {
		f.codes = map[Code]bool{}
	}
	f.codes[code] = true
	f.list = append(f.list, &edpb.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// Len returns the number of violations so far.
func (f *Fields) Len() int { return len(f.list) }

// Err returns nil if no field was invalid, otherwise an error listing them
// all, with their common code (INVALID_REQUEST when they differ).
func (f *Fields) Err() error {
	code := InvalidRequest
	if len(f.codes) == 1 {
		for c := range f.codes {
			code = c
		}
	}
	return f.ErrCode(code)
}

// ErrCode is Err with a more specific code.
func (f *Fields) ErrCode(code Code) error {
	if len(f.list) == 0 {
		return nil
	}
	parts := make([]string, len(f.list))
	for i, v := range f.list {
		parts[i] = v.GetField() + ": " + v.GetDescription()
	}
	return &Error{Code: code, Message: strings.Join(parts, "; "), Violations: f.list}
}
