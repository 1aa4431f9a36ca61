package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
	"github.com/sluice-io/sluice/libs/scram"
)

// Credentials written through the controller reach its metadata image (and
// so every watcher) and survive a restart; Describe never returns secrets;
// invalid entries fail per user without touching other users.
func TestScramCredentials(t *testing.T) {
	etcd, dir := metastoretest.Config(t), t.TempDir()
	c := startActiveController(t, etcd, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	up := func(user string, m scram.Mechanism, pw string) *controllerv1.ScramCredentialUpsertion {
		u, err := scram.NewUpsertion(user, m, pw, 4096)
		require.NoError(t, err)
		return u
	}
	bad := up("bob", scram.SHA256, "x")
	bad.Iterations = 10
	resp, err := c.AlterUserScramCredentials(ctx, &controllerv1.AlterUserScramCredentialsRequest{
		Upsertions: []*controllerv1.ScramCredentialUpsertion{up("alice", scram.SHA256, "a-pw"), up("alice", scram.SHA512, "a-pw"), bad},
	})
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), 2)
	require.Equal(t, "alice", resp.GetResults()[0].GetUser())
	require.Nil(t, resp.GetResults()[0].GetError())
	require.Equal(t, "bob", resp.GetResults()[1].GetUser())
	require.Equal(t, errs.InvalidRequest, errs.FromProto(resp.GetResults()[1].GetError()).Code)

	v := scram.NewVerifier(scram.NewStore(c.cache), -1)
	require.NoError(t, v.Verify(ctx, "alice", "a-pw"))
	require.Error(t, v.Verify(ctx, "bob", "x"))

	desc, err := c.DescribeUserScramCredentials(ctx, &controllerv1.DescribeUserScramCredentialsRequest{})
	require.NoError(t, err)
	require.Len(t, desc.GetResults(), 1)
	require.Equal(t, []*controllerv1.ScramCredentialInfo{
		{Mechanism: scram.SHA256, Iterations: 4096}, {Mechanism: scram.SHA512, Iterations: 4096},
	}, desc.GetResults()[0].GetCredentials())
	desc, err = c.DescribeUserScramCredentials(ctx, &controllerv1.DescribeUserScramCredentialsRequest{Users: []string{"nobody"}})
	require.NoError(t, err)
	require.Equal(t, errs.ResourceNotFound, errs.FromProto(desc.GetResults()[0].GetError()).Code)

	// Deleting a credential that is not there fails; deleting both removes
	// the user.
	resp, err = c.AlterUserScramCredentials(ctx, &controllerv1.AlterUserScramCredentialsRequest{
		Deletions: []*controllerv1.ScramCredentialDeletion{{User: "carol", Mechanism: scram.SHA256}},
	})
	require.NoError(t, err)
	require.Equal(t, errs.ResourceNotFound, errs.FromProto(resp.GetResults()[0].GetError()).Code)
	_, err = c.AlterUserScramCredentials(ctx, &controllerv1.AlterUserScramCredentialsRequest{})
	require.Equal(t, errs.InvalidRequest, errs.CodeOf(err))

	// A delta for the change, and a restart's snapshot, carry the users.
	stopController(t, c)
	c = startActiveController(t, etcd, dir)
	defer stopController(t, c)
	require.Contains(t, c.cache.Load().ScramUsers, "alice")
	img := metadata.FromSnapshot(c.cache.Load().Snapshot())
	require.Len(t, img.ScramUsers["alice"].GetCredentials(), 2)

	resp, err = c.AlterUserScramCredentials(ctx, &controllerv1.AlterUserScramCredentialsRequest{
		Deletions: []*controllerv1.ScramCredentialDeletion{{User: "alice", Mechanism: scram.SHA256}, {User: "alice", Mechanism: scram.SHA512}},
	})
	require.NoError(t, err)
	require.Nil(t, resp.GetResults()[0].GetError())
	require.NotContains(t, c.cache.Load().ScramUsers, "alice")
	require.NotContains(t, img.Apply(&controllerv1.MetadataDelta{DeletedScramUsers: []string{"alice"}}).ScramUsers, "alice")
}
