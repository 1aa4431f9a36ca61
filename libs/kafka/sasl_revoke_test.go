package kafka_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/kafka"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/scram"
)

// scramUser returns user's credentials for every mechanism with password pw.
func scramUser(t *testing.T, user, pw string) *controllerv1.UserScramCredentials {
	t.Helper()
	u := &controllerv1.UserScramCredentials{User: user}
	for _, m := range scram.Mechanisms {
		up, err := scram.NewUpsertion(user, m, pw, scram.MinIterations)
		require.NoError(t, err)
		c, err := scram.CredentialFrom(up)
		require.NoError(t, err)
		u.Credentials = append(u.Credentials, c)
	}
	return u
}

// A SASL connection's session ends at its next request once its user is
// deleted or given a new password, with or without a session lifetime
// (KIP-368): the connection is closed, as for an expired session. Changes
// to other users, and metadata changes without user changes, leave it
// open.
func TestSASLUserDeletedOrPasswordChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(users map[string]*controllerv1.UserScramCredentials)
	}{
		{"deleted", func(users map[string]*controllerv1.UserScramCredentials) { delete(users, "alice") }},
		{"password changed", func(users map[string]*controllerv1.UserScramCredentials) {
			users["alice"] = scramUser(t, "alice", "new-pw")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := metadata.NewCache()
			img := metadata.Empty()
			img.Revision = 1
			img.ScramUsers = map[string]*controllerv1.UserScramCredentials{
				"alice": scramUser(t, "alice", "alice-pw"), "bob": scramUser(t, "bob", "bob-pw")}
			cache.Reset(img)
			// change publishes a new image whose users f changed.
			change := func(f func(map[string]*controllerv1.UserScramCredentials)) {
				cur := cache.Load()
				next := *cur
				next.Revision++
				next.ScramUsers = map[string]*controllerv1.UserScramCredentials{}
				for k, v := range cur.ScramUsers {
					next.ScramUsers[k] = v
				}
				f(next.ScramUsers)
				cache.Reset(&next)
			}
			store := scram.NewStore(cache)
			seen := make(chan auth.Identity, 16)
			mux := kafka.NewMux()
			mux.Handle(kmsg.Heartbeat.Int16(), 0, 4, func(ctx context.Context, req *kafka.Request) (kafka.Reply, error) {
				id, _ := auth.FromContext(ctx)
				seen <- id
				return kafka.Now(req.Msg.(*kmsg.HeartbeatRequest).ResponseKind()), nil
			})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			s := kafka.NewServer(kafka.Config{}, mux, lis, kafka.ServerOptions{SASL: &kafka.SASLOptions{
				Mechanisms:  []string{kafka.MechanismPlain, kafka.MechanismScramSHA256},
				Credentials: store, Passwords: scram.NewVerifier(store, 0),
			}})
			require.NoError(t, s.Start(context.Background()))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				require.NoError(t, s.Stop(ctx))
			})

			plain, scr := dial(t, s), dial(t, s)
			require.Zero(t, plain.plain("alice", "alice-pw").ErrorCode)
			require.Zero(t, scr.scram(kafka.MechanismScramSHA256, "alice", "alice-pw").ErrorCode)
			// bob's password changes and an unrelated revision passes.
			change(func(u map[string]*controllerv1.UserScramCredentials) { u["bob"] = scramUser(t, "bob", "bob-pw2") })
			change(func(map[string]*controllerv1.UserScramCredentials) {})
			require.Equal(t, "User:alice", plain.heartbeat(t, seen).Principal.String())
			require.Equal(t, "User:alice", scr.heartbeat(t, seen).Principal.String())

			change(tc.change)
			for _, c := range []*client{plain, scr} {
				c.send(heartbeat("g"), 4)
				c.requireClosed()
			}
			require.Empty(t, seen, "no request was served after the change")
		})
	}
}
