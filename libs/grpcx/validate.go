package grpcx

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// Validators maps request message types to validation functions. The
// server's interceptors run the function of every received message (unary
// requests and each message on a client stream) before the handler sees it,
// and answer InvalidArgument with the field violations when it fails.
type Validators struct {
	mu sync.RWMutex
	m  map[protoreflect.FullName]func(proto.Message) error
}

// NewValidators returns an empty registry.
func NewValidators() *Validators {
	return &Validators{m: map[protoreflect.FullName]func(proto.Message) error{}}
}

// Register adds the validator of message type T. A validator returns nil or
// an error; an *errs.Error keeps its code and field violations, anything else
// becomes INVALID_REQUEST.
func Register[T proto.Message](v *Validators, fn func(T) error) {
	var zero T
	name := zero.ProtoReflect().Descriptor().FullName()
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, dup := v.m[name]; dup {
		panic(fmt.Sprintf("grpcx: validator for %s registered twice", name))
	}
	v.m[name] = func(m proto.Message) error { return fn(m.(T)) }
}

// Validate runs the validator registered for msg's type, if any.
func (v *Validators) Validate(msg any) error {
	pm, ok := msg.(proto.Message)
	if !ok {
		return nil // raw pass-through messages are validated by their handler
	}
	v.mu.RLock()
	fn := v.m[pm.ProtoReflect().Descriptor().FullName()]
	v.mu.RUnlock()
	if fn == nil {
		return nil
	}
	err := fn(pm)
	if err == nil {
		return nil
	}
	var se *errs.Error
	if errors.As(err, &se) {
		return se
	}
	return errs.New(errs.InvalidRequest, "%v", err)
}

func (v *Validators) unaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := v.Validate(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func (v *Validators) streamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, v: v})
	}
}

type validatingStream struct {
	grpc.ServerStream
	v *Validators
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.v.Validate(m)
}
