package authz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/auth"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func allow(principal string, op authz.Operation, rt authz.ResourceType, name string, pt authz.PatternType) authz.ACL {
	return authz.ACL{Principal: principal, Host: "*", Operation: op, Permission: authz.Allow, ResourceType: rt, Name: name, Pattern: pt}
}

func deny(principal string, op authz.Operation, rt authz.ResourceType, name string, pt authz.PatternType) authz.ACL {
	a := allow(principal, op, rt, name, pt)
	a.Permission = authz.Deny
	return a
}

func onHost(a authz.ACL, host string) authz.ACL { a.Host = host; return a }

func user(name, host string) auth.Identity {
	return auth.Identity{Principal: auth.User(name), Host: host}
}

func TestAuthorizeMatrix(t *testing.T) {
	const lit, pre = authz.Literal, authz.Prefixed
	T, G, C, X := authz.Topic, authz.Group, authz.Cluster, authz.TransactionalID
	alice, bob := user("alice", "10.0.0.1"), user("bob", "10.0.0.2")
	cases := []struct {
		name     string
		acls     []authz.ACL
		cfg      authz.Config
		id       auth.Identity
		op       authz.Operation
		rt       authz.ResourceType
		resource string
		want     bool
	}{
		{"literal allow", []authz.ACL{allow("User:alice", authz.Write, T, "orders", lit)}, authz.Config{}, alice, authz.Write, T, "orders", true},
		{"literal other name", []authz.ACL{allow("User:alice", authz.Write, T, "orders", lit)}, authz.Config{}, alice, authz.Write, T, "orders2", false},
		{"literal other principal", []authz.ACL{allow("User:alice", authz.Write, T, "orders", lit)}, authz.Config{}, bob, authz.Write, T, "orders", false},
		{"literal other operation", []authz.ACL{allow("User:alice", authz.Write, T, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"literal other resource type", []authz.ACL{allow("User:alice", authz.Read, G, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"prefixed allow", []authz.ACL{allow("User:alice", authz.Read, T, "orders-", pre)}, authz.Config{}, alice, authz.Read, T, "orders-eu", true},
		{"prefixed equals name", []authz.ACL{allow("User:alice", authz.Read, T, "orders-", pre)}, authz.Config{}, alice, authz.Read, T, "orders-", true},
		{"prefixed longer than name", []authz.ACL{allow("User:alice", authz.Read, T, "orders-", pre)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"prefixed is not infix", []authz.ACL{allow("User:alice", authz.Read, T, "orders", pre)}, authz.Config{}, alice, authz.Read, T, "x-orders", false},
		{"literal is not prefix", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders-eu", false},
		{"wildcard name", []authz.ACL{allow("User:alice", authz.Read, T, "*", lit)}, authz.Config{}, alice, authz.Read, T, "anything", true},
		{"wildcard name other type", []authz.ACL{allow("User:alice", authz.Read, T, "*", lit)}, authz.Config{}, alice, authz.Read, G, "anything", false},
		{"prefixed star is literal star", []authz.ACL{allow("User:alice", authz.Read, T, "*", pre)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"wildcard principal", []authz.ACL{allow("User:*", authz.Read, T, "orders", lit)}, authz.Config{}, bob, authz.Read, T, "orders", true},
		{"wildcard principal anonymous", []authz.ACL{allow("User:*", authz.Read, T, "orders", lit)}, authz.Config{}, auth.Identity{Principal: auth.Anonymous}, authz.Read, T, "orders", true},
		{"host match", []authz.ACL{onHost(allow("User:alice", authz.Read, T, "orders", lit), "10.0.0.1")}, authz.Config{}, alice, authz.Read, T, "orders", true},
		{"host mismatch", []authz.ACL{onHost(allow("User:alice", authz.Read, T, "orders", lit), "10.0.0.9")}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"deny wins over allow", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit), deny("User:alice", authz.Read, T, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"deny prefixed wins over literal allow", []authz.ACL{allow("User:alice", authz.Read, T, "orders-eu", lit), deny("User:alice", authz.Read, T, "orders-", pre)}, authz.Config{}, alice, authz.Read, T, "orders-eu", false},
		{"deny wildcard principal wins", []authz.ACL{allow("User:alice", authz.All, T, "orders", lit), deny("User:*", authz.Write, T, "*", lit)}, authz.Config{}, alice, authz.Write, T, "orders", false},
		{"deny All denies Read", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit), deny("User:alice", authz.All, T, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"deny from one host only", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit), onHost(deny("User:alice", authz.Read, T, "orders", lit), "10.0.0.9")}, authz.Config{}, alice, authz.Read, T, "orders", true},
		{"deny of another principal", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit), deny("User:bob", authz.Read, T, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders", true},
		{"deny Read does not deny Describe", []authz.ACL{allow("User:alice", authz.Describe, T, "orders", lit), deny("User:alice", authz.Read, T, "orders", lit)}, authz.Config{}, alice, authz.Describe, T, "orders", true},
		{"Read implies Describe", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit)}, authz.Config{}, alice, authz.Describe, T, "orders", true},
		{"Write implies Describe", []authz.ACL{allow("User:alice", authz.Write, T, "orders", lit)}, authz.Config{}, alice, authz.Describe, T, "orders", true},
		{"Delete implies Describe", []authz.ACL{allow("User:alice", authz.Delete, G, "g", lit)}, authz.Config{}, alice, authz.Describe, G, "g", true},
		{"Alter implies Describe", []authz.ACL{allow("User:alice", authz.Alter, T, "orders", lit)}, authz.Config{}, alice, authz.Describe, T, "orders", true},
		{"AlterConfigs implies DescribeConfigs", []authz.ACL{allow("User:alice", authz.AlterConfigs, T, "orders", lit)}, authz.Config{}, alice, authz.DescribeConfigs, T, "orders", true},
		{"Describe implies nothing", []authz.ACL{allow("User:alice", authz.Describe, T, "orders", lit)}, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"Read does not imply Write", []authz.ACL{allow("User:alice", authz.Read, T, "orders", lit)}, authz.Config{}, alice, authz.Write, T, "orders", false},
		{"DescribeConfigs does not imply AlterConfigs", []authz.ACL{allow("User:alice", authz.DescribeConfigs, T, "orders", lit)}, authz.Config{}, alice, authz.AlterConfigs, T, "orders", false},
		{"All implies Write", []authz.ACL{allow("User:alice", authz.All, X, "tx", lit)}, authz.Config{}, alice, authz.Write, X, "tx", true},
		{"cluster action", []authz.ACL{allow("User:alice", authz.IdempotentWrite, C, authz.ClusterName, lit)}, authz.Config{}, alice, authz.IdempotentWrite, C, authz.ClusterName, true},
		{"super user without ACLs", nil, authz.Config{SuperUsers: []string{"User:alice"}}, alice, authz.Alter, C, authz.ClusterName, true},
		{"super user despite deny", []authz.ACL{deny("User:alice", authz.All, T, "*", lit)}, authz.Config{SuperUsers: []string{"User:admin", "User:alice"}}, alice, authz.Write, T, "orders", true},
		{"not a super user", nil, authz.Config{SuperUsers: []string{"User:admin"}}, alice, authz.Read, T, "orders", false},
		{"role identity", []authz.ACL{deny("User:*", authz.All, C, authz.ClusterName, lit)}, authz.Config{}, auth.Identity{Principal: auth.User("node-1"), Role: "storage-node"}, authz.ClusterAction, C, authz.ClusterName, true},
		{"no ACL found, default deny", nil, authz.Config{}, alice, authz.Read, T, "orders", false},
		{"no ACL found, allow everyone", nil, authz.Config{AllowEveryoneIfNoACLFound: true}, alice, authz.Read, T, "orders", true},
		{"ACL of another principal on the resource: allow-everyone no longer applies", []authz.ACL{allow("User:bob", authz.Read, T, "orders", lit)}, authz.Config{AllowEveryoneIfNoACLFound: true}, alice, authz.Read, T, "orders", false},
		{"ACL on another resource: allow-everyone applies", []authz.ACL{allow("User:bob", authz.Read, T, "payments", lit)}, authz.Config{AllowEveryoneIfNoACLFound: true}, alice, authz.Read, T, "orders", true},
		{"prefixed ACL counts as found", []authz.ACL{allow("User:bob", authz.Read, T, "ord", pre)}, authz.Config{AllowEveryoneIfNoACLFound: true}, alice, authz.Read, T, "orders", false},
		{"allow-everyone does not override deny", []authz.ACL{deny("User:alice", authz.Read, T, "orders", lit)}, authz.Config{AllowEveryoneIfNoACLFound: true}, alice, authz.Read, T, "orders", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := authz.New(tc.cfg)
			a.SetACLs(tc.acls, 1)
			got := a.Authorize(context.Background(), tc.id, tc.op, tc.rt, tc.resource)
			require.Equal(t, tc.want, got, "%s %s %s %q with %v", tc.id, tc.op, tc.rt, tc.resource, tc.acls)
		})
	}
}

func TestSetACLsReplacesTheSet(t *testing.T) {
	a := authz.New(authz.Config{})
	alice := user("alice", "10.0.0.1")
	require.False(t, a.Authorize(context.Background(), alice, authz.Read, authz.Topic, "orders"))
	in := []authz.ACL{allow("User:alice", authz.Read, authz.Topic, "orders", authz.Literal)}
	a.SetACLs(in, 7)
	in[0].Name = "changed" // the authorizer keeps its own copy
	require.True(t, a.Authorize(context.Background(), alice, authz.Read, authz.Topic, "orders"))
	got, rev := a.ACLs()
	require.Equal(t, int64(7), rev)
	require.Equal(t, "orders", got[0].Name)
	a.SetACLs(nil, 8)
	require.False(t, a.Authorize(context.Background(), alice, authz.Read, authz.Topic, "orders"))
}

func TestCheckDeniesWithAuditLine(t *testing.T) {
	var buf bytes.Buffer
	a := authz.New(authz.Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	a.SetACLs([]authz.ACL{allow("User:alice", authz.Write, authz.Topic, "orders", authz.Literal)}, 1)
	ctx := auth.NewContext(context.Background(), user("alice", "10.0.0.1"))

	require.NoError(t, authz.Check(ctx, a, authz.Write, authz.Topic, "orders"))
	require.Zero(t, buf.Len(), "an allowed check writes no audit line")

	err := authz.Check(ctx, a, authz.Read, authz.Group, "billing")
	require.Equal(t, errs.GroupAuthorizationFailed, errs.CodeOf(err))
	require.Contains(t, err.Error(), `User:alice may not Read Group "billing" from host 10.0.0.1`)

	var line struct {
		Msg   string `json:"msg"`
		Level string `json:"level"`
		Audit struct {
			Principal, Host, Operation, Resource, Decision string
		} `json:"audit"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	require.Equal(t, "WARN", line.Level)
	require.Equal(t, "User:alice", line.Audit.Principal)
	require.Equal(t, "10.0.0.1", line.Audit.Host)
	require.Equal(t, "Read", line.Audit.Operation)
	require.Equal(t, "Group:billing", line.Audit.Resource)
	require.Equal(t, "deny", line.Audit.Decision)

	// FilterAllowed drops what the caller may not describe, without audit lines.
	buf.Reset()
	require.Equal(t, []string{"orders"}, authz.FilterAllowed(ctx, a, authz.Describe, authz.Topic, []string{"billing", "orders"}))
	require.Zero(t, buf.Len())
}

func TestACLValidate(t *testing.T) {
	ok := allow("User:alice", authz.Read, authz.Topic, "orders", authz.Literal)
	field, problem := ok.Validate()
	require.Empty(t, field, problem)
	mutate := func(f func(*authz.ACL)) authz.ACL { a := ok; f(&a); return a }
	for want, bad := range map[string]authz.ACL{
		"resource_type": mutate(func(a *authz.ACL) { a.ResourceType = authz.ResourceUnknown }),
		"pattern_type":  mutate(func(a *authz.ACL) { a.Pattern = authz.PatternUnknown }),
		"resource_name": mutate(func(a *authz.ACL) { a.Name = "" }),
		"principal":     mutate(func(a *authz.ACL) { a.Principal = "alice" }),
		"host":          mutate(func(a *authz.ACL) { a.Host = "example.com" }),
		"permission":    mutate(func(a *authz.ACL) { a.Permission = authz.PermissionUnknown }),
		"operation":     mutate(func(a *authz.ACL) { a.Operation = authz.ClusterAction }),
	} {
		field, problem := bad.Validate()
		require.Equal(t, want, field, problem)
		require.NotEmpty(t, problem)
	}
	field, _ = mutate(func(a *authz.ACL) { a.ResourceType = authz.Cluster; a.Name = "orders" }).Validate()
	require.Equal(t, "resource_name", field)
	field, _ = mutate(func(a *authz.ACL) { a.Name = "*"; a.Pattern = authz.Prefixed }).Validate()
	require.Equal(t, "resource_name", field)
	field, _ = mutate(func(a *authz.ACL) { a.Host = "::1"; a.Principal = "User:*" }).Validate()
	require.Empty(t, field)
	// Principal types are case-sensitive (as Kafka compares them) and
	// only User is authenticated: other spellings would never match.
	field, problem = mutate(func(a *authz.ACL) { a.Principal = "user:alice" }).Validate()
	require.Equal(t, "principal", field)
	require.Contains(t, problem, "case-sensitive, as in Kafka: write User:alice")
	field, _ = mutate(func(a *authz.ACL) { a.Principal = "Group:eng" }).Validate()
	require.Equal(t, "principal", field)
}

// Hosts compare as addresses, not strings: an IPv4-mapped IPv6 address is
// its IPv4 address either way round, and IPv6 spellings of one address are
// equal. A Deny written with the other spelling must still deny.
func TestAuthorizeHostCanonical(t *testing.T) {
	read := func(principal, host string, perm authz.Permission) authz.ACL {
		a := onHost(allow(principal, authz.Read, authz.Topic, "orders", authz.Literal), host)
		a.Permission = perm
		return a
	}
	ctx := context.Background()
	for _, tc := range []struct{ aclHost, callerHost string }{
		{"::ffff:10.0.0.9", "10.0.0.9"},
		{"10.0.0.9", "::ffff:10.0.0.9"},
		{"2001:DB8:0:0::1", "2001:db8::1"},
		{"2001:db8::1", "2001:0db8::0001"},
	} {
		a := authz.New(authz.Config{})
		a.SetACLs([]authz.ACL{read("User:alice", tc.aclHost, authz.Allow)}, 1)
		require.True(t, a.Authorize(ctx, user("alice", tc.callerHost), authz.Read, authz.Topic, "orders"), "allow %v", tc)
		require.False(t, a.Authorize(ctx, user("alice", "10.0.0.8"), authz.Read, authz.Topic, "orders"), "allow %v", tc)

		a.SetACLs([]authz.ACL{read("User:*", "*", authz.Allow), read("User:alice", tc.aclHost, authz.Deny)}, 2)
		require.False(t, a.Authorize(ctx, user("alice", tc.callerHost), authz.Read, authz.Topic, "orders"), "deny %v", tc)
		require.True(t, a.Authorize(ctx, user("alice", "10.0.0.8"), authz.Read, authz.Topic, "orders"), "deny %v", tc)
	}
	// A caller without an address matches only "*".
	a := authz.New(authz.Config{})
	a.SetACLs([]authz.ACL{read("User:alice", "10.0.0.9", authz.Allow)}, 1)
	require.False(t, a.Authorize(ctx, user("alice", ""), authz.Read, authz.Topic, "orders"))

	for in, want := range map[string]string{"*": "*", "::FFFF:10.0.0.1": "10.0.0.1", "2001:DB8::0:1": "2001:db8::1", "10.0.0.1": "10.0.0.1"} {
		got, ok := authz.CanonicalHost(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	_, ok := authz.CanonicalHost("db.example.com")
	require.False(t, ok)
	require.Equal(t, "10.0.0.1", onHost(allow("User:a", authz.Read, authz.Topic, "t", authz.Literal), "::ffff:10.0.0.1").Canonical().Host)
	require.True(t, authz.Filter{Host: "::ffff:10.0.0.9"}.Matches(read("User:alice", "10.0.0.9", authz.Allow)))
	require.False(t, authz.Filter{Host: "10.0.0.8"}.Matches(read("User:alice", "10.0.0.9", authz.Allow)))
}

func TestParseNames(t *testing.T) {
	for _, s := range []string{"IdempotentWrite", "idempotent-write", "IDEMPOTENT_WRITE"} {
		op, err := authz.ParseOperation(s)
		require.NoError(t, err)
		require.Equal(t, authz.IdempotentWrite, op)
	}
	_, err := authz.ParseOperation("fly")
	require.ErrorContains(t, err, "DescribeConfigs")
	rt, err := authz.ParseResourceType("transactional-id")
	require.NoError(t, err)
	require.Equal(t, authz.TransactionalID, rt)
	pt, err := authz.ParsePatternType("PREFIXED")
	require.NoError(t, err)
	require.Equal(t, authz.Prefixed, pt)
}

func TestFilterMatches(t *testing.T) {
	a := allow("User:alice", authz.Read, authz.Topic, "orders", authz.Prefixed)
	require.True(t, authz.Filter{}.Matches(a))
	require.True(t, authz.Filter{Principal: "User:alice", Pattern: authz.Prefixed}.Matches(a))
	require.False(t, authz.Filter{Name: "orders-eu"}.Matches(a))
	require.False(t, authz.Filter{Permission: authz.Deny}.Matches(a))
}

func BenchmarkAuthorize(b *testing.B) {
	a := authz.New(authz.Config{})
	var acls []authz.ACL
	for i := 0; i < 1000; i++ {
		acls = append(acls, allow("User:u"+string(rune('a'+i%26)), authz.Read, authz.Topic, "t"+string(rune('a'+i%26)), authz.Prefixed))
	}
	acls = append(acls, allow("User:alice", authz.Read, authz.Topic, "orders", authz.Literal))
	a.SetACLs(acls, 1)
	id := user("alice", "10.0.0.1")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if a.Authorize(ctx, id, authz.Describe, authz.Topic, "orders-eu-west-1") {
			b.Fatal("allowed without an ACL on the topic")
		}
	}
}
