package grpcx

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// streamStopper ends long-lived streams when the server stops.
//
// grpc's GracefulStop waits for every open stream to end, and a client's
// ProduceStream, following Fetch or watch ends only when the client ends
// it: without this a stopping node waited out its whole graceful-stop
// timeout and was then closed with calls cut off, or killed by an
// orchestrator first. A broker that stops tells its clients to go
// elsewhere instead: every stream ends with BROKER_NOT_AVAILABLE
// (UNAVAILABLE, retriable), and clients reconnect to the partitions' new
// leaders.
//
// A stream the client sends on (ProduceStream) is ended only once the
// requests it accepted are answered: new messages are refused from the
// stop on, and a handler that registered OnStop is asked to finish its
// answers. Such a handler runs on a goroutine of its own, so that the
// stream can be ended while the handler waits for the client's next
// message; gRPC then resets the stream and that wait returns.
type streamStopper struct {
	mu       sync.Mutex
	stopping map[string]bool // services whose streams end; "" for all
	streams  map[*stoppableStream]struct{}
}

func newStreamStopper() *streamStopper {
	return &streamStopper{stopping: map[string]bool{}, streams: map[*stoppableStream]struct{}{}}
}

// errStopping is the status of a stream ended by the stop.
func errStopping() error {
	return errs.New(errs.BrokerNotAvailable, "this node is shutting down; retry on the partition's current leader or another node")
}

// IsStopping reports whether err is the error a stream's RecvMsg returns
// because the server is stopping.
func IsStopping(err error) bool { return errors.Is(err, errStreamStopping) }

var errStreamStopping = errors.New("server stopping")

// stoppingErr wraps the status so that IsStopping recognises it and
// toStatus still sends BROKER_NOT_AVAILABLE.
type stoppingErr struct{ status error }

func (e stoppingErr) Error() string   { return e.status.Error() }
func (e stoppingErr) Unwrap() []error { return []error{e.status, errStreamStopping} }

func newStoppingErr() error { return stoppingErr{errStopping()} }

func (st *streamStopper) stoppingLocked(service string) bool {
	return st.stopping[""] || st.stopping[service]
}

func (st *streamStopper) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	service := ServiceOf(info.FullMethod)
	s := &stoppableStream{ServerStream: ss, service: service, clientSends: info.IsClientStream,
		idle: make(chan struct{}), ended: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.WithValue(ss.Context(), stopKey{}, s))
	defer close(s.ended)
	defer s.cancel()
	st.mu.Lock()
	if st.stoppingLocked(service) {
		st.mu.Unlock()
		return errStopping()
	}
	st.streams[s] = struct{}{}
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.streams, s)
		st.mu.Unlock()
	}()
	if !s.clientSends {
		err := handler(srv, s)
		if s.stopped() {
			return errStopping()
		}
		return err
	}
	done := make(chan error, 1)
	go func() { done <- handler(srv, s) }()
	select {
	case err := <-done:
		if s.stopped() && (errors.Is(err, context.Canceled) || IsStopping(err)) {
			return errStopping()
		}
		return err
	case <-s.idle:
		// Everything accepted is answered and the handler waits for a
		// message: ending the stream here resets it, and the handler's
		// wait returns an error it ends on.
		return errStopping()
	}
}

// stop ends the open streams of services (all of them when none is given)
// and refuses new ones; it returns once they ended or ctx ended.
func (st *streamStopper) stop(ctx context.Context, services ...string) {
	st.mu.Lock()
	if len(services) == 0 {
		services = []string{""}
	}
	for _, name := range services {
		st.stopping[name] = true
	}
	var ending []*stoppableStream
	for s := range st.streams {
		if st.stoppingLocked(s.service) {
			ending = append(ending, s)
		}
	}
	st.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ending {
		wg.Go(func() { s.stop(ctx) })
	}
	wg.Wait()
}

type stopKey struct{}

// OnStop registers finish for the stream whose context is ctx: when the
// server stops while the handler waits for the client's next message,
// finish is called and the stream ends when it returns. finish must
// return once every request the handler accepted is answered (or the
// stream failed). A handler that is not waiting when the server stops
// learns of it from RecvMsg (IsStopping) and must answer what it accepted
// before it returns. Without OnStop a client-streaming handler's context
// is cancelled instead.
func OnStop(ctx context.Context, finish func()) {
	s, ok := ctx.Value(stopKey{}).(*stoppableStream)
	if !ok {
		return
	}
	s.mu.Lock()
	s.finish = finish
	s.mu.Unlock()
}

type stoppableStream struct {
	grpc.ServerStream
	ctx         context.Context
	cancel      context.CancelFunc
	service     string
	clientSends bool
	idle        chan struct{} // closed when the stream may be ended
	ended       chan struct{} // closed when the interceptor returned

	mu       sync.Mutex
	stopping bool
	inRecv   bool // RecvMsg waits, begun before the stop
	finish   func()
}

func (s *stoppableStream) Context() context.Context { return s.ctx }

func (s *stoppableStream) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

func (s *stoppableStream) RecvMsg(m any) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return newStoppingErr()
	}
	s.inRecv = true
	s.mu.Unlock()
	err := s.ServerStream.RecvMsg(m)
	s.mu.Lock()
	s.inRecv = false
	stopping := s.stopping
	s.mu.Unlock()
	if err == nil && stopping {
		// Received after the stop began: not accepted. The client sends
		// it again, with everything else unanswered, elsewhere.
		return newStoppingErr()
	}
	return err
}

// stop ends the stream and returns once it ended or ctx ended: a stream
// that only sends (Fetch, watches) by cancelling its context; one the
// client sends on once what it accepted is answered.
func (s *stoppableStream) stop(ctx context.Context) {
	s.end(ctx)
	select {
	case <-s.ended:
	case <-ctx.Done():
	}
}

func (s *stoppableStream) end(ctx context.Context) {
	s.mu.Lock()
	s.stopping = true
	waiting, finish := s.inRecv, s.finish
	s.mu.Unlock()
	if !s.clientSends || finish == nil {
		s.cancel()
	}
	if !s.clientSends || !waiting {
		// The handler returns by itself: at its context's end or at its
		// next RecvMsg.
		return
	}
	if finish != nil {
		finished := make(chan struct{})
		go func() {
			finish()
			close(finished)
		}()
		select {
		case <-finished:
		case <-ctx.Done():
		}
	}
	close(s.idle)
}
