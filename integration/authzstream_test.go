package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
	"github.com/sluice-io/sluice/libs/client/scramcred"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// A following Fetch stream and a ProduceStream opened while alice may
// read and write topic s end with PERMISSION_DENIED, naming what was lost,
// once the ACLs are deleted: the storage node decides long-lived streams
// again when its ACL set changes. The test measures, over several trials,
// the time from sending DeleteAcls to each stream's end. A following Fetch
// of a password user ends with UNAUTHENTICATED when the user is deleted.
func TestAuthzStreamsEndWhenACLRemoved(t *testing.T) {
	c := startAuthzCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.admin.CreateTopic(ctx, "s", 1, 1, nil)
	require.NoError(t, err)
	acls := []*controllerv1.AclBinding{
		topicACL("User:alice", "s", controllerv1.AclOperation_ACL_OPERATION_READ),
		topicACL("User:alice", "s", controllerv1.AclOperation_ACL_OPERATION_WRITE),
	}
	alice, err := client.New(client.Config{Bootstrap: c.Bootstrap(), TLS: c.userTLS(t, "alice"), RequestTimeout: 20 * time.Second})
	require.NoError(t, err)
	defer alice.Close()
	conn, err := alice.Conn(c.storage.Addr)
	require.NoError(t, err)
	storage := storagev1.NewStorageServiceClient(conn)
	b := record.NewBuilder(record.CodecNone)
	require.NoError(t, b.Append(&record.Record{Timestamp: time.Now().UnixMilli(), Value: []byte("v")}))
	batch, err := b.Build()
	require.NoError(t, err)

	// ended is when and how a stream ended.
	type ended struct {
		at  time.Time
		err error
	}
	const trials = 5
	var fetchLag, produceLag, deleteRTT []time.Duration
	for trial := range trials {
		c.createACLs(ctx, t, acls...)
		sctx, scancel := context.WithCancel(ctx)
		ps, err := storage.ProduceStream(sctx)
		require.NoError(t, err)
		id := uint64(0)
		// produce sends one request and returns its partition's error
		// code, or the stream's error.
		produce := func() (errs.Code, error) {
			id++
			if err := ps.Send(&storagev1.ProduceStreamRequest{RequestId: id, Request: &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_LEADER,
				Partitions: []*storagev1.ProducePartition{{Topic: "s", Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}}}}}); err != nil {
				_, err = ps.Recv() // the stream's status
				return 0, err
			}
			resp, err := ps.Recv()
			if err != nil {
				return 0, err
			}
			return resp.GetResponse().GetResults()[0].GetError().GetCode(), nil
		}
		// The ACLs reach the storage node through its metadata watch.
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, err := produce()
			require.NoError(t, err)
			if code == 0 {
				break
			}
			require.Equal(t, errs.TopicAuthorizationFailed, code)
			require.True(t, time.Now().Before(deadline), "alice's ACLs did not reach the storage node in 10 s")
			time.Sleep(time.Millisecond)
		}
		fs, err := storage.Fetch(sctx, &storagev1.FetchRequest{Follow: true, Partitions: []*storagev1.FetchPartition{{Topic: "s"}}})
		require.NoError(t, err)
		first, err := fs.Recv()
		require.NoError(t, err)
		require.Nil(t, first.GetError())

		fetchEnd, produceEnd := make(chan ended, 1), make(chan ended, 1)
		go func() {
			for {
				if _, err := fs.Recv(); err != nil {
					fetchEnd <- ended{time.Now(), err}
					return
				}
			}
		}()
		producing := make(chan struct{})
		go func() {
			for n := 0; ; n++ {
				// A request decided after the change but before the
				// stream's next decision is refused alone; the next one
				// ends the stream.
				if _, err := produce(); err != nil {
					produceEnd <- ended{time.Now(), err}
					return
				}
				if n == 0 {
					close(producing)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		// The fetch stream runs already (it sent its first message).
		select {
		case <-producing:
		case e := <-produceEnd:
			t.Fatalf("trial %d: the produce stream ended before the ACL change: %v", trial, e.err)
		}
		sent := time.Now()
		d, err := c.admin.DeleteAcls(ctx, acls...)
		require.NoError(t, err)
		require.Len(t, d.GetDeleted(), len(acls))
		deleteRTT = append(deleteRTT, time.Since(sent))
		for _, w := range []struct {
			ch   chan ended
			lag  *[]time.Duration
			what string
		}{{fetchEnd, &fetchLag, `may not Read Topic "s"`}, {produceEnd, &produceLag, `may not Write Topic "s"`}} {
			select {
			case e := <-w.ch:
				require.Equal(t, codes.PermissionDenied, status.Code(e.err), "trial %d: %v", trial, e.err)
				require.Equal(t, errs.TopicAuthorizationFailed, errs.CodeOf(e.err), "%v", e.err)
				require.Contains(t, e.err.Error(), "the ACLs changed")
				require.Contains(t, e.err.Error(), w.what)
				*w.lag = append(*w.lag, e.at.Sub(sent))
			case <-time.After(10 * time.Second):
				t.Fatalf("trial %d: a stream kept going 10 s after its ACL was deleted (%s)", trial, w.what)
			}
		}
		scancel()
	}
	// bob, authenticated by a password, follows s; deleting bob ends the
	// stream with UNAUTHENTICATED.
	up, err := scramcred.NewUpsertion("bob", scramcred.SHA256, "bob-pw", scramcred.MinIterations)
	require.NoError(t, err)
	_, err = c.admin.AlterUserScramCredentials(ctx, &controllerv1.AlterUserScramCredentialsRequest{Upsertions: []*controllerv1.ScramCredentialUpsertion{up}})
	require.NoError(t, err)
	c.createACLs(ctx, t, topicACL("User:bob", "s", controllerv1.AclOperation_ACL_OPERATION_READ))
	caOnly, err := wire.ClientTLS(c.files.CA, "", "")
	require.NoError(t, err)
	bob, err := client.New(client.Config{Bootstrap: c.Bootstrap(), TLS: caOnly, User: "bob", Password: "bob-pw", RequestTimeout: 20 * time.Second})
	require.NoError(t, err)
	defer bob.Close()
	bconn, err := bob.Conn(c.storage.Addr)
	require.NoError(t, err)
	var bs storagev1.StorageService_FetchClient
	require.Eventually(t, func() bool { // bob and his ACL reach the storage node
		bs, err = storagev1.NewStorageServiceClient(bconn).Fetch(ctx, &storagev1.FetchRequest{Follow: true, Partitions: []*storagev1.FetchPartition{{Topic: "s"}}})
		if err != nil {
			return false
		}
		first, err := bs.Recv()
		return err == nil && first.GetError() == nil
	}, 10*time.Second, 5*time.Millisecond)
	_, err = c.admin.AlterUserScramCredentials(ctx, &controllerv1.AlterUserScramCredentialsRequest{Deletions: []*controllerv1.ScramCredentialDeletion{
		{User: "bob", Mechanism: controllerv1.ScramMechanism_SCRAM_MECHANISM_SHA_256}}})
	require.NoError(t, err)
	for {
		if _, err = bs.Recv(); err != nil {
			break
		}
	}
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), `user "bob" was deleted or its password changed`)

	for _, l := range [][]time.Duration{fetchLag, produceLag, deleteRTT} {
		slices.Sort(l)
	}
	// The streams often end before DeleteAcls returns: the storage node's
	// watch delivers the change while the controller's answer travels.
	t.Logf("DeleteAcls sent to the stream ending with PERMISSION_DENIED (%d trials): follow Fetch median %v max %v; ProduceStream (a request every 2 ms) median %v max %v; DeleteAcls round trip median %v",
		trials, fetchLag[trials/2], fetchLag[trials-1], produceLag[trials/2], produceLag[trials-1], deleteRTT[trials/2])
}
