package authz_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authn"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// fakeStream is a server stream whose messages always go through.
type fakeStream struct {
	ctx  context.Context
	sent atomic.Int64
}

func (s *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)       {}
func (s *fakeStream) Context() context.Context     { return s.ctx }
func (s *fakeStream) SendMsg(any) error            { s.sent.Add(1); return nil }
func (s *fakeStream) RecvMsg(any) error            { return nil }

// fakeUsers is a user set whose revision and credentials the test sets.
type fakeUsers struct {
	mu      sync.Mutex
	rev     int64
	cred    map[string]string
	changed chan struct{}
}

func (u *fakeUsers) UsersRevision() int64 { u.mu.Lock(); defer u.mu.Unlock(); return u.rev }
func (u *fakeUsers) UsersChanged() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.changed
}
func (u *fakeUsers) Credential(user string) any {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c, ok := u.cred[user]; ok {
		return c
	}
	return nil
}
func (u *fakeUsers) set(user, cred string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if cred == "" {
		delete(u.cred, user)
	} else {
		u.cred[user] = cred
	}
	u.rev++
	close(u.changed)
	u.changed = make(chan struct{})
}

// runGuarded runs handler as a stream of id under g and returns its
// result on a channel.
func runGuarded(g *authz.StreamGuard, id auth.Identity, handler grpc.StreamHandler) (*fakeStream, <-chan error) {
	ss := &fakeStream{ctx: auth.NewContext(context.Background(), id)}
	out := make(chan error, 1)
	go func() { out <- g.StreamServerInterceptor()(nil, ss, &grpc.StreamServerInfo{}, handler) }()
	return ss, out
}

func await(t *testing.T, out <-chan error) error {
	t.Helper()
	select {
	case err := <-out:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
		return nil
	}
}

// A stream that passed a check at its start is refused at its next
// message once the ACL allowing it is removed, and not before: an ACL
// change that keeps its access lets it go on.
func TestStreamGuardACLRemoved(t *testing.T) {
	a := authz.New(authz.Config{})
	read := allow("User:alice", authz.Read, authz.Topic, "orders", authz.Literal)
	a.SetACLs([]authz.ACL{read}, 1)
	g := &authz.StreamGuard{ACLs: a}
	step := make(chan struct{})
	ss, out := runGuarded(g, user("alice", "10.0.0.1"), func(_ any, s grpc.ServerStream) error {
		if err := authz.Check(s.Context(), a, authz.Read, authz.Topic, "orders"); err != nil {
			return err
		}
		for range step {
			if err := s.SendMsg(struct{}{}); err != nil {
				return err
			}
		}
		return nil
	})
	step <- struct{}{}
	// Another principal's ACL: the stream keeps its access.
	a.SetACLs([]authz.ACL{read, allow("User:bob", authz.Write, authz.Topic, "orders", authz.Literal)}, 2)
	step <- struct{}{}
	require.Eventually(t, func() bool { return ss.sent.Load() == 2 }, 5*time.Second, time.Millisecond)

	a.SetACLs(nil, 3)
	step <- struct{}{}
	err := await(t, out)
	require.Equal(t, int64(2), ss.sent.Load(), "the message after the removal is not sent")
	var e *errs.Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.Equal(t, errs.TopicAuthorizationFailed, e.Code)
	require.Contains(t, e.Message, `the ACLs changed`)
	require.Contains(t, e.Message, `User:alice may not Read Topic "orders"`)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
}

// A stream the client sends requests on (ProduceStream) still answers a
// request decided before the ACL was removed, and ends at its next
// request: an answer held back would leave the client waiting for it and
// the handler waiting for the client's next request.
func TestStreamGuardAnswersThenEndsAtNextRequest(t *testing.T) {
	a := authz.New(authz.Config{})
	a.SetACLs([]authz.ACL{allow("User:alice", authz.Write, authz.Topic, "orders", authz.Literal)}, 1)
	g := &authz.StreamGuard{ACLs: a}
	ss := &fakeStream{ctx: auth.NewContext(context.Background(), user("alice", "10.0.0.1"))}
	decided, removed := make(chan struct{}), make(chan struct{})
	out := make(chan error, 1)
	go func() {
		out <- g.StreamServerInterceptor()(nil, ss, &grpc.StreamServerInfo{IsClientStream: true, IsServerStream: true}, func(_ any, s grpc.ServerStream) error {
			for i := 0; ; i++ {
				if err := s.RecvMsg(nil); err != nil {
					return err
				}
				if err := authz.Check(s.Context(), a, authz.Write, authz.Topic, "orders"); err != nil {
					return err
				}
				if i == 0 {
					close(decided)
					<-removed // the ACL goes while this request is handled
				}
				if err := s.SendMsg(struct{}{}); err != nil {
					return err
				}
			}
		})
	}()
	<-decided
	a.SetACLs(nil, 2)
	close(removed)
	err := await(t, out)
	require.Equal(t, int64(1), ss.sent.Load(), "the answer to the request decided before the change is sent")
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), `User:alice may not Write Topic "orders"`)
}

// A stream that waits (a following fetch with no new data) is ended by the
// change itself: its context is cancelled and the refusal replaces the
// handler's result.
func TestStreamGuardWakesWaitingStream(t *testing.T) {
	a := authz.New(authz.Config{})
	a.SetACLs([]authz.ACL{allow("User:alice", authz.Write, authz.Topic, "orders", authz.Literal)}, 1)
	g := &authz.StreamGuard{ACLs: a}
	started := make(chan struct{})
	_, out := runGuarded(g, user("alice", "10.0.0.1"), func(_ any, s grpc.ServerStream) error {
		memo := authz.NewMemo(s.Context(), a, authz.Write, authz.Topic)
		if err := memo.Check("orders"); err != nil {
			return err
		}
		close(started)
		<-s.Context().Done()
		return nil
	})
	<-started
	a.SetACLs([]authz.ACL{deny("User:alice", authz.Write, authz.Topic, "orders", authz.Literal)}, 2)
	err := await(t, out)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), `User:alice may not Write Topic "orders"`)
}

// A password user's stream ends with UNAUTHENTICATED when the user is
// deleted or its password changes; other users' changes leave it alone.
// Streams of role certificates and super users are not guarded.
func TestStreamGuardUsers(t *testing.T) {
	for _, tc := range []struct{ name, newCred string }{{"deleted", ""}, {"password changed", "k2"}} {
		t.Run(tc.name, func(t *testing.T) {
			users := &fakeUsers{cred: map[string]string{"alice": "k1", "bob": "b1"}, changed: make(chan struct{})}
			g := &authz.StreamGuard{Users: users}
			id := auth.Identity{Principal: auth.User("alice"), Host: "10.0.0.1", Mechanism: authn.MechanismPassword}
			step := make(chan struct{})
			ss, out := runGuarded(g, id, func(_ any, s grpc.ServerStream) error {
				for range step {
					if err := s.RecvMsg(nil); err != nil {
						return err
					}
					_ = s.SendMsg(nil)
				}
				return nil
			})
			users.set("bob", "b2")
			step <- struct{}{}
			require.Eventually(t, func() bool { return ss.sent.Load() == 1 }, 5*time.Second, time.Millisecond)
			users.set("alice", tc.newCred)
			step <- struct{}{}
			err := await(t, out)
			require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			require.Contains(t, err.Error(), `user "alice" was deleted or its password changed`)
			require.Equal(t, int64(1), ss.sent.Load(), "the message after the change is not answered")
		})
	}
	t.Run("not guarded", func(t *testing.T) {
		a := authz.New(authz.Config{SuperUsers: []string{"User:admin"}})
		g := &authz.StreamGuard{ACLs: a}
		for _, id := range []auth.Identity{{Principal: auth.User("node"), Role: "storage-node", Mechanism: "mtls"}, {Principal: auth.User("admin")}} {
			var guarded bool
			_, out := runGuarded(g, id, func(_ any, s grpc.ServerStream) error {
				_, guarded = s.(*fakeStream)
				guarded = !guarded
				return nil
			})
			require.NoError(t, await(t, out))
			require.False(t, guarded, "%s", id)
		}
	})
}

// A non-role caller's internal stream (a WatchMetadata of an operator with
// ClusterAction) is decided again by CheckInternal's rule: once its
// explicit ACL is removed it ends, even with allow.everyone.if.no.acl.found
// and no ACL left on the cluster.
func TestStreamGuardInternalCallExplicit(t *testing.T) {
	a := authz.New(authz.Config{AllowEveryoneIfNoACLFound: true})
	a.SetACLs([]authz.ACL{allow("User:ops", authz.ClusterAction, authz.Cluster, authz.ClusterName, authz.Literal)}, 1)
	g := &authz.StreamGuard{ACLs: a}
	step := make(chan struct{})
	ss, out := runGuarded(g, user("ops", "10.0.0.1"), func(_ any, s grpc.ServerStream) error {
		if err := authz.CheckInternal(s.Context(), a, "WatchMetadata", "storage-node"); err != nil {
			return err
		}
		for range step {
			if err := s.SendMsg(struct{}{}); err != nil {
				return err
			}
		}
		return nil
	})
	step <- struct{}{}
	require.Eventually(t, func() bool { return ss.sent.Load() == 1 }, 5*time.Second, time.Millisecond)
	a.SetACLs(nil, 2)
	step <- struct{}{}
	err := await(t, out)
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "%v", err)
	require.Equal(t, int64(1), ss.sent.Load())
}

// BenchmarkStreamGuardMessage is the cost a guarded stream adds to one
// message while nothing changes (the revision comparison), and to one
// allowed check made on its context (recording it).
func BenchmarkStreamGuardMessage(b *testing.B) {
	a := authz.New(authz.Config{})
	a.SetACLs([]authz.ACL{allow("User:alice", authz.Write, authz.Topic, "orders", authz.Literal)}, 1)
	g := &authz.StreamGuard{ACLs: a}
	id := user("alice", "10.0.0.1")
	run := func(b *testing.B, perMessage func(s grpc.ServerStream) error) {
		_, out := runGuarded(g, id, func(_ any, s grpc.ServerStream) error {
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := perMessage(s); err != nil {
					return err
				}
			}
			b.StopTimer()
			return nil
		})
		if err := <-out; err != nil {
			b.Fatal(err)
		}
	}
	b.Run("send", func(b *testing.B) {
		run(b, func(s grpc.ServerStream) error { return s.SendMsg(nil) })
	})
	b.Run("check+send", func(b *testing.B) {
		run(b, func(s grpc.ServerStream) error {
			if err := authz.Check(s.Context(), a, authz.Write, authz.Topic, "orders"); err != nil {
				return err
			}
			return s.SendMsg(nil)
		})
	})
	b.Run("unguarded check", func(b *testing.B) {
		ctx := auth.NewContext(context.Background(), id)
		b.ReportAllocs()
		for range b.N {
			if err := authz.Check(ctx, a, authz.Write, authz.Topic, "orders"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
