package scram_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	xscram "github.com/xdg-go/scram"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/scram"
)

// storeWith returns a store whose image holds the given users, each with
// both mechanisms set to its password.
func storeWith(t *testing.T, users map[string]string) (*scram.Store, *metadata.Cache) {
	t.Helper()
	cache := metadata.NewCache()
	setUsers(t, cache, users)
	return scram.NewStore(cache), cache
}

func setUsers(t *testing.T, cache *metadata.Cache, users map[string]string) {
	t.Helper()
	img := metadata.Empty()
	img.ScramUsers = map[string]*controllerv1.UserScramCredentials{}
	for user, pw := range users {
		u := &controllerv1.UserScramCredentials{User: user}
		for _, m := range scram.Mechanisms {
			up, err := scram.NewUpsertion(user, m, pw, scram.MinIterations)
			require.NoError(t, err)
			c, err := scram.CredentialFrom(up)
			require.NoError(t, err)
			u.Credentials = append(u.Credentials, c)
		}
		img.ScramUsers[user] = u
	}
	cache.Reset(img)
}

// The keys match what an independent SCRAM client derives from the same
// password, salt and iterations.
func TestKeysMatchClient(t *testing.T) {
	for _, tc := range []struct {
		m   scram.Mechanism
		gen xscram.HashGeneratorFcn
	}{{scram.SHA256, xscram.SHA256}, {scram.SHA512, xscram.SHA512}} {
		up, err := scram.NewUpsertion("alice", tc.m, "pencil", 4096)
		require.NoError(t, err)
		c, err := scram.CredentialFrom(up)
		require.NoError(t, err)
		cl, err := tc.gen.NewClient("alice", "pencil", "")
		require.NoError(t, err)
		want := cl.GetStoredCredentials(xscram.KeyFactors{Salt: string(up.GetSalt()), Iters: 4096})
		require.Equal(t, want.StoredKey, c.GetStoredKey(), scram.Name(tc.m))
		require.Equal(t, want.ServerKey, c.GetServerKey(), scram.Name(tc.m))
	}
}

func TestCredentialFromValidates(t *testing.T) {
	good, err := scram.NewUpsertion("bob", scram.SHA256, "pw", 4096)
	require.NoError(t, err)
	for name, mut := range map[string]func(u *controllerv1.ScramCredentialUpsertion){
		"empty user":     func(u *controllerv1.ScramCredentialUpsertion) { u.User = "" },
		"control char":   func(u *controllerv1.ScramCredentialUpsertion) { u.User = "a\nb" },
		"few iterations": func(u *controllerv1.ScramCredentialUpsertion) { u.Iterations = 4095 },
		"many":           func(u *controllerv1.ScramCredentialUpsertion) { u.Iterations = 16385 },
		"short salt":     func(u *controllerv1.ScramCredentialUpsertion) { u.Salt = u.Salt[:15] },
		"no mechanism":   func(u *controllerv1.ScramCredentialUpsertion) { u.Mechanism = 0 },
		"salted length":  func(u *controllerv1.ScramCredentialUpsertion) { u.SaltedPassword = u.SaltedPassword[:31] },
	} {
		u := &controllerv1.ScramCredentialUpsertion{User: good.User, Mechanism: good.Mechanism, Iterations: good.Iterations, Salt: good.Salt, SaltedPassword: good.SaltedPassword}
		mut(u)
		_, err := scram.CredentialFrom(u)
		require.Error(t, err, name)
		require.Equal(t, errs.InvalidRequest, errs.CodeOf(err), name)
	}
	_, err = scram.NewUpsertion("bob", scram.SHA256, "pw", 100)
	require.Error(t, err)
}

// converse runs a whole SCRAM conversation between an xdg-go client and a
// server conversation of store.
func converse(t *testing.T, store *scram.Store, m scram.Mechanism, user, pw string) (ok bool, authUser string) {
	t.Helper()
	gen := map[scram.Mechanism]xscram.HashGeneratorFcn{scram.SHA256: xscram.SHA256, scram.SHA512: xscram.SHA512}[m]
	cl, err := gen.NewClient(user, pw, "")
	require.NoError(t, err)
	cc := cl.NewConversation()
	sc, err := store.NewConversation(m)
	require.NoError(t, err)
	c1, err := cc.Step("")
	require.NoError(t, err)
	s1, err := sc.Step(c1)
	if err != nil {
		return false, ""
	}
	c2, err := cc.Step(s1)
	require.NoError(t, err)
	s2, err := sc.Step(c2)
	if err != nil || !sc.Valid() {
		return false, ""
	}
	_, err = cc.Step(s2) // the client checks the server's signature
	require.NoError(t, err)
	return true, sc.Username()
}

func TestConversation(t *testing.T) {
	store, _ := storeWith(t, map[string]string{"alice": "secret-a"})
	for _, m := range scram.Mechanisms {
		ok, who := converse(t, store, m, "alice", "secret-a")
		require.True(t, ok, scram.Name(m))
		require.Equal(t, "alice", who)
		ok, _ = converse(t, store, m, "alice", "wrong")
		require.False(t, ok, scram.Name(m))
		// An unknown user fails the same way, at the proof.
		ok, _ = converse(t, store, m, "mallory", "secret-a")
		require.False(t, ok, scram.Name(m))
	}
}

func TestVerifier(t *testing.T) {
	store, cache := storeWith(t, map[string]string{"alice": "secret-a", "bob": "secret-b"})
	v := scram.NewVerifier(store, time.Minute)
	ctx := context.Background()
	require.NoError(t, v.Verify(ctx, "alice", "secret-a"))
	require.NoError(t, v.Verify(ctx, "bob", "secret-b"))
	for _, bad := range [][2]string{{"alice", "secret-b"}, {"alice", ""}, {"carol", "secret-a"}, {"", ""}, {"alice", "secret-a "}} {
		err := v.Verify(ctx, bad[0], bad[1])
		require.Error(t, err, bad)
		require.Equal(t, errs.SaslAuthenticationFailed, errs.CodeOf(err), bad)
	}

	// A remembered success costs no PBKDF2: far faster than the first.
	start := time.Now()
	require.NoError(t, v.Verify(ctx, "alice", "secret-a"))
	cachedTook := time.Since(start)
	v2 := scram.NewVerifier(store, -1)
	start = time.Now()
	require.NoError(t, v2.Verify(ctx, "alice", "secret-a"))
	fullTook := time.Since(start)
	t.Logf("verify: %v with PBKDF2 (%d iterations), %v remembered", fullTook, scram.MinIterations, cachedTook)
	require.Less(t, cachedTook, fullTook)

	// A changed password takes effect at once, remembered or not.
	setUsers(t, cache, map[string]string{"alice": "new-a"})
	require.Error(t, v.Verify(ctx, "alice", "secret-a"))
	require.NoError(t, v.Verify(ctx, "alice", "new-a"))
	require.Error(t, v.Verify(ctx, "bob", "secret-b"), "deleted user")
}

// A client-final nonce that repeats the client's part before the server's
// nonce (librdkafka 2.0) is accepted as Kafka accepts it, with the proof
// computed over the message as sent; a wrong password still fails.
func TestConversationRepeatedClientNonce(t *testing.T) {
	store, _ := storeWith(t, map[string]string{"alice": "secret-a"})
	for _, pw := range []string{"secret-a", "wrong"} {
		sc, err := store.NewConversation(scram.SHA256)
		require.NoError(t, err)
		s1, err := sc.Step("n,,n=alice,r=clientnonce")
		require.NoError(t, err)
		var nonce, salt string
		iters := 0
		for _, f := range strings.Split(s1, ",") {
			switch {
			case strings.HasPrefix(f, "r="):
				nonce = f[2:]
			case strings.HasPrefix(f, "s="):
				b, err := base64.StdEncoding.DecodeString(f[2:])
				require.NoError(t, err)
				salt = string(b)
			case strings.HasPrefix(f, "i="):
				iters, _ = strconv.Atoi(f[2:])
			}
		}
		withoutProof := "c=biws,r=clientnonce" + nonce
		authMsg := "n=alice,r=clientnonce," + s1 + "," + withoutProof
		salted, err := scram.SaltedPassword(scram.SHA256, pw, []byte(salt), iters)
		require.NoError(t, err)
		ck := hmac.New(sha256.New, salted)
		ck.Write([]byte("Client Key"))
		clientKey := ck.Sum(nil)
		stored := sha256.Sum256(clientKey)
		sig := hmac.New(sha256.New, stored[:])
		sig.Write([]byte(authMsg))
		proof := sig.Sum(nil)
		for i := range proof {
			proof[i] ^= clientKey[i]
		}
		out, err := sc.Step(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof))
		require.True(t, sc.Done())
		if pw == "wrong" {
			require.Error(t, err)
			require.False(t, sc.Valid())
			continue
		}
		require.NoError(t, err)
		require.True(t, sc.Valid())
		require.True(t, strings.HasPrefix(out, "v="))
	}
}

// An unknown user is refused after the same work as a wrong password: one
// PBKDF2 derivation against a stand-in credential, never a shortcut.
func TestVerifierUnknownUserCostsTheSame(t *testing.T) {
	store, _ := storeWith(t, map[string]string{"alice": "secret-a"})
	v := scram.NewVerifier(store, -1)
	var n int
	scram.CountDerivations(v, &n)
	ctx := context.Background()

	require.Error(t, v.Verify(ctx, "alice", "wrong"))
	require.Equal(t, 1, n, "wrong password")
	require.Error(t, v.Verify(ctx, "mallory", "wrong"))
	require.Equal(t, 2, n, "unknown user: the same derivation")
	require.Error(t, v.Verify(ctx, "mallory", "secret-a"))
	require.Equal(t, 3, n)
	require.NoError(t, v.Verify(ctx, "alice", "secret-a"))
	require.Equal(t, 4, n)

	// The stand-in is stable per name and mechanism, differs between
	// names, has a real credential's shape, and no password matches it.
	f1 := scram.FakeCredential(store, "mallory", scram.SHA512)
	require.Equal(t, f1.GetSalt(), scram.FakeCredential(store, "mallory", scram.SHA512).GetSalt())
	require.NotEqual(t, f1.GetSalt(), scram.FakeCredential(store, "eve", scram.SHA512).GetSalt())
	require.NotEqual(t, f1.GetSalt(), scram.FakeCredential(store, "mallory", scram.SHA256).GetSalt())
	require.Len(t, f1.GetStoredKey(), 64)
	require.Len(t, scram.FakeCredential(store, "mallory", scram.SHA256).GetStoredKey(), 32)
	require.EqualValues(t, scram.DefaultIterations, f1.GetIterations())
}

// A SCRAM conversation for an unknown user answers the same salt every
// time, as for a real user, so asking twice does not reveal it.
func TestConversationUnknownUserStableSalt(t *testing.T) {
	store, _ := storeWith(t, map[string]string{"alice": "secret-a"})
	first := func(user string) string {
		cl, err := xscram.SHA256.NewClient(user, "pw", "")
		require.NoError(t, err)
		c1, err := cl.NewConversation().Step("")
		require.NoError(t, err)
		sc, err := store.NewConversation(scram.SHA256)
		require.NoError(t, err)
		s1, err := sc.Step(c1)
		require.NoError(t, err)
		for _, f := range strings.Split(s1, ",") {
			if v, ok := strings.CutPrefix(f, "s="); ok {
				return v
			}
		}
		t.Fatalf("no salt in %q", s1)
		return ""
	}
	require.Equal(t, first("mallory"), first("mallory"))
	require.Equal(t, first("alice"), first("alice"))
	require.NotEqual(t, first("mallory"), first("eve"))
}
