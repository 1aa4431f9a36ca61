package authz

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Users is where a long-lived stream learns that the user it authenticated
// as with a password was deleted or given another password (scram.Store
// implements it over the metadata image).
type Users interface {
	// UsersRevision changes whenever a user is created, changed or deleted
	// (it may change more often). It must be cheap: it is read per message.
	UsersRevision() int64
	// UsersChanged returns a channel closed at the next change of
	// UsersRevision.
	UsersChanged() <-chan struct{}
	// Credential returns a comparable value that changes whenever user's
	// credentials change, and nil when the user does not exist.
	Credential(user string) any
}

// StreamGuard re-decides the authorization of long-lived gRPC streams (a
// following Fetch, a ProduceStream, replication and watch streams): a
// check at the start of a stream would otherwise hold for as long as the
// stream lives, after the ACL that allowed it is removed or the user it
// authenticated as is deleted.
//
// Its interceptor records every check the handler passed on the stream's
// context (Check, Memo, CheckInternal record what they allowed). Before
// each message the stream sends or after each one it receives, it compares
// the ACL generation and the users revision with those of its last
// re-decision, two atomic loads; only when one changed does it decide the
// recorded checks again against the current ACLs and compare the password
// user's credential with the one the stream started with. A refusal ends
// the stream: the message call returns the error, the stream's context is
// cancelled, and the handler's result is replaced by it,
// PERMISSION_DENIED with the resource's authorization code and what was
// lost, or UNAUTHENTICATED (SASL_AUTHENTICATION_FAILED) for a deleted user
// or a changed password. A stream waiting for data (a following Fetch with
// nothing new) is woken by a change: a goroutine per guarded stream waits
// for one.
//
// Streams of the cluster's own processes (role certificates) and of super
// users are never refused by ACLs and are not re-decided for them.
type StreamGuard struct {
	// ACLs is the process's authorizer; nil with authorization off.
	ACLs *ACLAuthorizer
	// Users, if set, ends streams of password users whose credentials
	// changed.
	Users Users
}

// StreamServerInterceptor guards every stream; it must run after the
// authentication interceptor (the identity is in the stream's context).
func (g *StreamGuard) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s := g.guard(ss)
		if s == nil {
			return handler(srv, ss)
		}
		s.answers = info != nil && info.IsClientStream
		defer s.cancel()
		go s.watch()
		err := handler(srv, s)
		if ferr := s.failure(); ferr != nil {
			return ferr
		}
		return err
	}
}

// guard returns the guarded stream, or nil when nothing about the caller
// can change: no ACLs to re-decide (off, a role, a super user) and no
// password user.
func (g *StreamGuard) guard(ss grpc.ServerStream) *guardedStream {
	ctx := ss.Context()
	id, _ := auth.FromContext(ctx)
	acls := g.ACLs
	if acls != nil && (id.Role != "" || acls.superUsers[identityOf(ctx).Principal.String()]) {
		acls = nil
	}
	users := g.Users
	if id.Mechanism != authn.MechanismPassword {
		users = nil
	}
	if acls == nil && users == nil {
		return nil
	}
	s := &guardedStream{ServerStream: ss, acls: acls, users: users, id: identityOf(ctx), checks: map[decision]struct{}{}}
	if acls != nil {
		s.aclGen.Store(acls.Generation())
	}
	if users != nil {
		s.userRev.Store(users.UsersRevision())
		s.cred = users.Credential(id.Principal.Name)
	}
	s.ctx, s.cancel = context.WithCancel(context.WithValue(ctx, recorderKey{}, s))
	return s
}

// decision is one check a stream passed.
type decision struct {
	op   Operation
	rt   ResourceType
	name string
	// explicit decides without allow.everyone.if.no.acl.found
	// (CheckInternal's rule for callers that are not roles).
	explicit bool
}

type recorderKey struct{}

// record notes that the caller of the stream in ctx, if any, was allowed op
// on (rt, name).
func record(ctx context.Context, op Operation, rt ResourceType, name string) {
	recordDecision(ctx, op, rt, name, false)
}

func recordDecision(ctx context.Context, op Operation, rt ResourceType, name string, explicit bool) {
	s, ok := ctx.Value(recorderKey{}).(*guardedStream)
	if !ok || s.acls == nil {
		return
	}
	d := decision{op: op, rt: rt, name: name, explicit: explicit}
	s.mu.Lock()
	s.checks[d] = struct{}{}
	s.mu.Unlock()
}

type guardedStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc
	acls   *ACLAuthorizer
	users  Users
	id     auth.Identity
	cred   any

	aclGen  atomic.Uint64
	userRev atomic.Int64
	failed  atomic.Pointer[errs.Error]

	// answers is set for streams the client sends on (client or bidi
	// streaming): what the server sends answers the client's requests.
	answers bool

	mu     sync.Mutex
	checks map[decision]struct{}
	last   decision // the last one recorded
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) SendMsg(m any) error {
	// A stream whose client sends requests (ProduceStream) sends answers
	// to requests already decided and done: an answer held back would
	// leave the client waiting for it, and the handler waiting for the
	// client's next request, until the client gave up. Such a stream ends
	// at its next request (RecvMsg); a stream that only sends (Fetch)
	// ends at its next message.
	if !s.answers {
		if err := s.recheck(); err != nil {
			return err
		}
	}
	return s.ServerStream.SendMsg(m)
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.recheck()
}

// failure is the refusal that ended the stream, or nil.
func (s *guardedStream) failure() error {
	if e := s.failed.Load(); e != nil {
		return e
	}
	return nil
}

// recheck re-decides the stream when the ACLs or the users changed since
// its last decision.
func (s *guardedStream) recheck() error {
	if err := s.failure(); err != nil {
		return err
	}
	if (s.acls == nil || s.acls.Generation() == s.aclGen.Load()) &&
		(s.users == nil || s.users.UsersRevision() == s.userRev.Load()) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failure(); err != nil {
		return err
	}
	if e := s.decide(); e != nil {
		s.failed.Store(e)
		s.cancel()
		return e
	}
	return nil
}

// decide re-decides everything the stream relies on; s.mu is held.
func (s *guardedStream) decide() *errs.Error {
	// The revisions are read before what they stand for and stored only
	// after a decision that allows: a message on another goroutine that
	// sees them unchanged must not slip past a refusal being made.
	var userRev int64
	if s.users != nil {
		userRev = s.users.UsersRevision()
		if s.users.Credential(s.id.Principal.Name) != s.cred {
			return errs.New(errs.SaslAuthenticationFailed,
				"user %q was deleted or its password changed since this stream authenticated; the stream is ended: connect again with the current password",
				s.id.Principal.Name)
		}
	}
	var aclGen uint64
	if s.acls != nil {
		aclGen = s.acls.Generation()
		for d := range s.checks {
			allowed := s.acls.Authorize
			if d.explicit {
				allowed = s.acls.AuthorizeExplicit
			}
			if allowed(s.ctx, s.id, d.op, d.rt, d.name) {
				continue
			}
			audit(s.ctx, s.acls, s.id, d.op, d.rt, d.name, false)
			lost := Denied(s.id, d.op, d.rt, d.name)
			lost.Message = "the ACLs changed and this stream is ended: " + lost.Message
			return lost
		}
	}
	s.userRev.Store(userRev)
	s.aclGen.Store(aclGen)
	return nil
}

// watch re-decides the stream at every change until it ends, so a stream
// that waits (nothing to send, nothing received) ends too.
func (s *guardedStream) watch() {
	for {
		var aclCh, userCh <-chan struct{}
		if s.acls != nil {
			aclCh = s.acls.Changed()
		}
		if s.users != nil {
			userCh = s.users.UsersChanged()
		}
		// A change between the last decision and taking the channels is
		// caught here.
		if s.recheck() != nil {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-aclCh:
		case <-userCh:
		}
	}
}
