package errs

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
)

// Error is a Sluice error: a catalog code, a message a person can act on,
// and optional hints that let a client redirect without another metadata
// call. It converts to a gRPC status (GRPCStatus) for whole-call failures and
// to an errordetails.v1.Error (Proto) for per-item results.
type Error struct {
	Code    Code
	Message string

	// Leader is set with leadership errors when the leader is known.
	Leader *edpb.LeaderHint
	// Coordinator is set with NOT_COORDINATOR.
	Coordinator *edpb.CoordinatorHint
	// Controller is set with NOT_CONTROLLER.
	Controller *edpb.ControllerHint
	// Violations lists invalid request fields (INVALID_REQUEST and other
	// validation codes).
	Violations []*edpb.FieldViolation

	cause error
}

// New returns an Error with a formatted message. If the arguments contain an
// error wrapped with %w, it becomes the cause.
func New(code Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	e := &Error{Code: code, Message: wrapped.Error()}
	e.cause = errors.Unwrap(wrapped)
	return e
}

// Invalid returns a validation error for one field. The code is usually
// InvalidRequest, or a more specific one such as InvalidPartitions.
func Invalid(code Code, field, format string, args ...any) *Error {
	desc := fmt.Sprintf(format, args...)
	return &Error{
		Code:       code,
		Message:    field + ": " + desc,
		Violations: []*edpb.FieldViolation{{Field: field, Description: desc}},
	}
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return Name(e.Code)
	}
	return Name(e.Code) + ": " + e.Message
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Retriable reports whether the catalog marks the code retriable.
func (e *Error) Retriable() bool { return Lookup(e.Code).Retriable }

// WithLeader attaches a leader hint and returns e.
func (e *Error) WithLeader(h *edpb.LeaderHint) *Error { e.Leader = h; return e }

// WithCoordinator attaches a coordinator hint and returns e.
func (e *Error) WithCoordinator(h *edpb.CoordinatorHint) *Error { e.Coordinator = h; return e }

// WithController attaches a controller hint and returns e.
func (e *Error) WithController(h *edpb.ControllerHint) *Error { e.Controller = h; return e }

// GRPCStatus converts e to a gRPC status carrying an ErrorInfo and any hints
// as details. grpc-go calls it when a handler returns e.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(Lookup(e.Code).GRPC, e.Error())
	details := []protoadapt.MessageV1{protoadapt.MessageV1Of(&edpb.ErrorInfo{
		Code: e.Code, Retriable: e.Retriable(), Message: e.Message,
	})}
	if e.Leader != nil {
		details = append(details, protoadapt.MessageV1Of(e.Leader))
	}
	if e.Coordinator != nil {
		details = append(details, protoadapt.MessageV1Of(e.Coordinator))
	}
	if e.Controller != nil {
		details = append(details, protoadapt.MessageV1Of(e.Controller))
	}
	if len(e.Violations) > 0 {
		details = append(details, protoadapt.MessageV1Of(&edpb.BadRequest{FieldViolations: e.Violations}))
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		// Details only fail to marshal on programming errors; the bare status
		// still carries the code and message.
		return st
	}
	return withDetails
}

// Proto converts e to the per-item error message used in multi-item
// responses. A nil e converts to nil (success).
func (e *Error) Proto() *edpb.Error {
	if e == nil {
		return nil
	}
	return &edpb.Error{
		Code:        e.Code,
		Message:     e.Message,
		Retriable:   e.Retriable(),
		Leader:      e.Leader,
		Coordinator: e.Coordinator,
	}
}

// FromProto converts a per-item error to an Error; nil means success.
func FromProto(p *edpb.Error) *Error {
	if p == nil || p.GetCode() == None {
		return nil
	}
	return &Error{Code: p.GetCode(), Message: p.GetMessage(), Leader: p.GetLeader(), Coordinator: p.GetCoordinator()}
}

// ItemError converts any error to a per-item error message: Sluice errors
// keep their code, anything else becomes UNKNOWN_SERVER_ERROR.
func ItemError(err error) *edpb.Error {
	if err == nil {
		return nil
	}
	return From(err).Proto()
}

// From converts any error into an Error:
//   - an *Error (possibly wrapped) is returned as is;
//   - a gRPC status from a Sluice server is decoded with its details;
//   - context cancellation and deadline errors map to REQUEST_TIMED_OUT;
//   - a gRPC status without details maps by its gRPC code;
//   - anything else is UNKNOWN_SERVER_ERROR.
//
// From(nil) returns nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &Error{Code: RequestTimedOut, Message: err.Error(), cause: err}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Code: UnknownServerError, Message: err.Error(), cause: err}
	}
	out := &Error{Code: codeForGRPC(st.Code()), Message: st.Message(), cause: err}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *edpb.ErrorInfo:
			out.Code = d.GetCode()
			out.Message = d.GetMessage()
		case *edpb.LeaderHint:
			out.Leader = d
		case *edpb.CoordinatorHint:
			out.Coordinator = d
		case *edpb.ControllerHint:
			out.Controller = d
		case *edpb.BadRequest:
			out.Violations = d.GetFieldViolations()
		}
	}
	return out
}

// CodeOf returns the Sluice code of err (None for nil).
func CodeOf(err error) Code {
	if err == nil {
		return None
	}
	return From(err).Code
}

// Is reports whether err carries the given code.
func Is(err error, code Code) bool { return err != nil && CodeOf(err) == code }

// IsRetriable reports whether err may succeed if retried. Transport failures
// (Unavailable without Sluice details, such as a refused connection) are
// retriable.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	return From(err).Retriable()
}

// codeForGRPC maps a bare gRPC status (one without Sluice details, for
// example from the transport or a proxy) to the closest Sluice code.
func codeForGRPC(c codes.Code) Code {
	switch c {
	case codes.Unavailable:
		return NodeUnreachable
	case codes.DeadlineExceeded, codes.Canceled:
		return RequestTimedOut
	case codes.InvalidArgument:
		return InvalidRequest
	case codes.NotFound:
		return ResourceNotFound
	case codes.Unimplemented:
		return Unimplemented
	case codes.PermissionDenied, codes.Unauthenticated:
		return ClusterAuthorizationFailed
	case codes.ResourceExhausted:
		return ThrottlingQuotaExceeded
	default:
		return UnknownServerError
	}
}
