package faults

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
)

// LinkRule is one link fault: calls to Peer on methods whose full name
// contains MethodContains wait Delay plus up to Jitter per message, and
// their unary requests are sent twice with probability Duplicate (see
// faultapi.LinkRequest).
type LinkRule struct {
	Peer           string
	MethodContains string
	Delay, Jitter  time.Duration
	Duplicate      float64
}

func (r LinkRule) matches(peer, method string) bool {
	return (r.Peer == faultapi.AnyPeer || r.Peer == peer) && strings.Contains(method, r.MethodContains)
}

// duplicateTimeout bounds a duplicate's call: the caller has its answer
// already, so nothing else ends it.
const duplicateTimeout = 30 * time.Second

// Links holds a process's link faults and applies them to its outgoing
// gRPC calls through the client interceptors of DialOptions. A process
// installs them on its role-to-role connections only with
// --unsafe.fault-injection: without the flag no call passes through here.
// With the flag and no fault, a call costs one atomic load (per message on
// a stream). It is safe for concurrent use.
type Links struct {
	// active is the rules in force, nil when there are none; replaced, not
	// changed, under mu.
	active atomic.Pointer[[]*LinkRule]

	mu  sync.Mutex
	rng *rand.Rand

	delayed, duplicated atomic.Int64
}

// NewLinks returns a Links without faults whose random draws (jitter,
// duplicates) come from seed.
func NewLinks(seed uint64) *Links {
	return &Links{rng: rand.New(rand.NewPCG(seed, 0x6c696e6b))}
}

// Add puts r in force until the returned function is called (calling it
// again does nothing).
func (l *Links) Add(r LinkRule) (remove func()) {
	rule := &r
	l.mu.Lock()
	var next []*LinkRule
	if cur := l.active.Load(); cur != nil {
		next = slices.Clone(*cur)
	}
	next = append(next, rule)
	l.active.Store(&next)
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		cur := l.active.Load()
		if cur == nil {
			return
		}
		next := slices.DeleteFunc(slices.Clone(*cur), func(x *LinkRule) bool { return x == rule })
		if len(next) == 0 {
			l.active.Store(nil)
		} else {
			l.active.Store(&next)
		}
	}
}

// Clear removes every rule and says how many there were.
func (l *Links) Clear() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	if cur := l.active.Swap(nil); cur != nil {
		n = len(*cur)
	}
	return n
}

// Counts returns how many messages waited and how many unary requests
// were sent twice since the process started.
func (l *Links) Counts() (delayed, duplicated int64) {
	return l.delayed.Load(), l.duplicated.Load()
}

// DialOptions returns the client interceptors that apply the faults, for
// wire.ClientOptions.Extra.
func (l *Links) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(l.unary), grpc.WithChainStreamInterceptor(l.stream)}
}

// match returns the rules for a call to target on method (nil for none).
func (l *Links) match(target, method string) []*LinkRule {
	cur := l.active.Load()
	if cur == nil {
		return nil
	}
	peer := peerOf(target)
	var out []*LinkRule
	for _, r := range *cur {
		if r.matches(peer, method) {
			out = append(out, r)
		}
	}
	return out
}

// peerOf strips the resolver scheme wire.Dial puts before the address.
func peerOf(target string) string {
	if i := strings.Index(target, ":///"); i >= 0 {
		return target[i+4:]
	}
	return target
}

// delay draws the wait of one message under rules.
func (l *Links) delay(rules []*LinkRule) time.Duration {
	var d time.Duration
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rules {
		d += r.Delay
		if r.Jitter > 0 {
			d += time.Duration(l.rng.Int64N(int64(r.Jitter)))
		}
	}
	return d
}

// duplicate draws whether a unary request under rules is sent twice.
func (l *Links) duplicate(rules []*LinkRule) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rules {
		if r.Duplicate > 0 && l.rng.Float64() < r.Duplicate {
			return true
		}
	}
	return false
}

// wait sleeps d, or until ctx ends (then returns its error).
func (l *Links) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	l.delayed.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (l *Links) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	rules := l.match(cc.Target(), method)
	if rules == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var dup any
	if l.duplicate(rules) {
		// The caller may reuse the request once answered: the copy is
		// taken now.
		dup = copyRequest(req)
	}
	if err := l.wait(ctx, l.delay(rules)); err != nil {
		return status.FromContextError(err).Err()
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if dup != nil {
		l.duplicated.Add(1)
		go l.resend(context.WithoutCancel(ctx), method, dup, reply, cc, invoker, opts, rules)
	}
	if werr := l.wait(ctx, l.delay(rules)); werr != nil && err == nil {
		// The answer was still on its way when the caller gave up.
		return status.FromContextError(werr).Err()
	}
	return err
}

// resend sends the copy of a request whose original was answered, after
// the link's delay; its answer goes nowhere.
func (l *Links) resend(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, rules []*LinkRule) {
	ctx, cancel := context.WithTimeout(ctx, duplicateTimeout)
	defer cancel()
	if l.wait(ctx, l.delay(rules)) != nil {
		return
	}
	// The answer of a copy is of no use to anyone: whatever it says (an
	// error included), the caller had the original's.
	_ = invoker(ctx, method, req, reflect.New(reflect.TypeOf(reply).Elem()).Interface(), cc, opts...)
}

// copyRequest returns a copy of a request that stays valid after the
// original call, or nil when req cannot be copied (a wire.Frame owns
// memory that is released once sent): such a request is not duplicated.
func copyRequest(req any) any {
	switch m := req.(type) {
	case proto.Message:
		return proto.Clone(m)
	case wire.Encoded:
		out := make(wire.Encoded, len(m))
		for i, b := range m {
			out[i] = slices.Clone(b)
		}
		return out
	}
	return nil
}

func (l *Links) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	target := cc.Target()
	if rules := l.match(target, method); rules != nil {
		if err := l.wait(ctx, l.delay(rules)); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	// Wrapped whether or not a fault is in force now: a fault added later
	// reaches the long-lived streams (follower fetches, heartbeats,
	// metadata watches) too.
	return &linkStream{ClientStream: cs, l: l, target: target, method: method}, nil
}

// linkStream delays the messages of a stream under the link faults in
// force when each is sent or received.
type linkStream struct {
	grpc.ClientStream
	l              *Links
	target, method string
}

func (s *linkStream) SendMsg(m any) error {
	if rules := s.l.match(s.target, s.method); rules != nil {
		// A stream that ends meanwhile makes SendMsg itself fail, as it
		// should.
		_ = s.l.wait(s.Context(), s.l.delay(rules))
	}
	return s.ClientStream.SendMsg(m)
}

func (s *linkStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		return err
	}
	if rules := s.l.match(s.target, s.method); rules != nil {
		// The message is the caller's now (it may hold a received buffer):
		// delivered late, never dropped; the next call sees the stream's
		// end.
		_ = s.l.wait(s.Context(), s.l.delay(rules))
	}
	return nil
}
