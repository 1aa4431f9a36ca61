package nodeapi

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/log"
)

// connectTimeout bounds how long one attempt waits for a connection that is
// not up yet, so a dead or paused node is passed over for the next one
// instead of holding the call until its deadline.
const connectTimeout = 2 * time.Second

// onController runs fn on the active controller: the one metadata names
// first, then every other controller (a standby answers NOT_CONTROLLER with
// a hint, followed at once). While no controller accepts the call for a
// retriable reason (an election, a quorum without majority, a node that
// cannot be reached) it tries again with backoff until ctx ends, then
// returns the last error. Any other error is returned as the controller
// phrased it.
func (n *node) onController(ctx context.Context, fn func(ctx context.Context, cc controllerv1.ControllerServiceClient) error) error {
	backoff := 50 * time.Millisecond
	var last error
	for {
		err := n.controllerPass(ctx, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if !errs.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return gaveUp("no controller accepted the call", last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// controllerPass makes one pass over the known controllers.
func (n *node) controllerPass(ctx context.Context, fn func(ctx context.Context, cc controllerv1.ControllerServiceClient) error) error {
	img := n.cache.Load()
	var addrs []string
	if a := img.ControllerAddress(); a != "" {
		addrs = append(addrs, a)
	}
	for _, c := range img.Controllers {
		if a := c.GetAddress(); a != "" && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return errs.New(errs.NotController, "no controller is known to this node yet")
	}
	var last error
	for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
		conn, err := n.readyConn(ctx, addrs[i])
		if err == nil {
			err = fn(ctx, controllerv1.NewControllerServiceClient(conn))
			if err == nil {
				return nil
			}
		}
		last = err
		e := errs.From(err)
		if h := e.Controller.GetAddress(); e.Code == errs.NotController && h != "" && !slices.Contains(addrs[:i+1], h) {
			addrs = slices.Insert(addrs, i+1, h)
			continue
		}
		switch e.Code {
		case errs.NotController, errs.NodeUnreachable, errs.NodeNotReady, errs.RequestTimedOut:
			continue
		}
		return err
	}
	if last == nil {
		last = ctx.Err()
	}
	return last
}

// readyConn returns the pooled connection to addr once it is up, waiting at
// most connectTimeout for it.
func (n *node) readyConn(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	conn, err := n.pool.Get(addr)
	if err != nil {
		return nil, errs.New(errs.NodeUnreachable, "connecting to %s: %v", addr, err)
	}
	conn.Connect()
	wctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if s == connectivity.Shutdown || !conn.WaitForStateChange(wctx, s) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, errs.New(errs.NodeUnreachable, "node at %s did not answer within %v", addr, connectTimeout)
		}
	}
	return conn, nil
}

// gaveUp is the error of a call whose time ran out while every answer was
// retriable: REQUEST_TIMED_OUT, which Kafka clients retry, naming why.
func gaveUp(what string, last error) error {
	if last == nil || errors.Is(last, context.DeadlineExceeded) || errors.Is(last, context.Canceled) {
		return errs.New(errs.RequestTimedOut, "%s before the request's timeout", what)
	}
	return errs.New(errs.RequestTimedOut, "%s before the request's timeout (last error: %v)", what, errs.From(last).Message)
}

// kafkaError is the Kafka error code and message to answer err with. Codes
// Sluice alone has (above 1000: a node not ready or unreachable, a
// controller quorum without majority) have no Kafka number; the retriable
// ones are answered REQUEST_TIMED_OUT, which every Kafka client retries,
// rather than UNKNOWN_SERVER_ERROR, which none does.
func kafkaError(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	e := errs.From(err)
	code := kafka.ErrorCode(e)
	msg := e.Message
	if msg == "" {
		msg = errs.Name(e.Code)
	}
	return code, &msg
}

// protoError is kafkaError for a per-item error of a gRPC response.
func protoError(e *errs.Error) (int16, *string) {
	if e == nil {
		return 0, nil
	}
	return kafkaError(e)
}

// splitRejected reports whether err refuses a whole request for a field of
// one of its items (the server's validators list the offending fields):
// sent item by item, each item gets its own answer instead.
func splitRejected(err error) bool {
	e := errs.From(err)
	return e != nil && len(e.Violations) > 0
}

// perItem forwards items to the controller in one call; when the controller
// refuses the call as a whole because of a field of some item, it forwards
// them one by one, so the bad ones get their own error and the good ones
// go through, as Kafka answers per item. call returns the per-item results
// of the items it was given, in order.
func perItem[I, R any](ctx context.Context, n *node, items []I, call func(ctx context.Context, cc controllerv1.ControllerServiceClient, items []I) ([]R, error), failed func(I, error) R) []R {
	if len(items) == 0 {
		return nil
	}
	var out []R
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = call(ctx, cc, items)
		return err
	})
	if err == nil && len(out) == len(items) {
		return out
	}
	if err == nil {
		err = errs.New(errs.UnknownServerError, "the controller answered %d results for %d items", len(out), len(items))
	}
	if len(items) == 1 || !splitRejected(err) {
		if splitRejected(err) {
			err = itemMessage(err)
		} else {
			n.logger.Warn("forwarded admin call failed", log.Err(err))
		}
		out = make([]R, len(items))
		for i, it := range items {
			out[i] = failed(it, err)
		}
		return out
	}
	out = make([]R, len(items))
	for i, it := range items {
		out[i] = perItem(ctx, n, []I{it}, call, failed)[0]
	}
	return out
}

// itemMessage is the message of a per-item error that came back as a
// whole-call refusal of a one-item request: the field paths of the
// violations without the request's "topics[0]." prefix, which means
// nothing to a Kafka client.
func itemMessage(err error) error {
	e := errs.From(err)
	if len(e.Violations) == 0 {
		return err
	}
	msg := ""
	for i, v := range e.Violations {
		if i > 0 {
			msg += "; "
		}
		field := v.GetField()
		if j := indexAfterItem(field); j >= 0 {
			field = field[j:]
		}
		if field != "" {
			msg += field + ": "
		}
		msg += v.GetDescription()
	}
	return &errs.Error{Code: e.Code, Message: msg}
}

// indexAfterItem returns where the path inside the first item starts in a
// field path such as "topics[0].name" (5 + len("[0].")), or -1.
func indexAfterItem(field string) int {
	for i := 0; i+3 < len(field); i++ {
		if field[i:i+4] == "[0]." {
			return i + 4
		}
	}
	if len(field) >= 3 && field[len(field)-3:] == "[0]" {
		return len(field)
	}
	return -1
}

// errorf is a catalog error for an answer this node gives itself.
func errorf(code errs.Code, format string, args ...any) error {
	return errs.New(code, format, args...)
}
