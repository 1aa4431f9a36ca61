package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	txnv1 "github.com/sluice-io/sluice/gen/go/sluice/txn/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/record"
)

// With --authz.enabled over mutual TLS, the cluster's own calls pass by
// the processes' role certificates (registration, heartbeats, metadata
// watch, replication) while clients get exactly what their ACLs allow, the
// same over gRPC and Kafka: alice, allowed to write and read topic t,
// produces to t on both protocols, is refused u with
// TOPIC_AUTHORIZATION_FAILED on both, sees only t in metadata, and is
// refused a group and a transactional id she has no ACL for.
func TestAuthzEnforcedOnBothProtocols(t *testing.T) {
	c := startAuthzCluster(t)
	storage := c.storage
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The super user sets up two topics and alice's ACLs.
	for _, name := range []string{"t", "u"} {
		_, err := c.admin.CreateTopic(ctx, name, 1, 1, nil)
		require.NoError(t, err)
	}
	c.createACLs(ctx, t, topicACL("User:alice", "t", controllerv1.AclOperation_ACL_OPERATION_WRITE),
		topicACL("User:alice", "t", controllerv1.AclOperation_ACL_OPERATION_READ))
	aliceTLS := c.userTLS(t, "alice")

	// gRPC: metadata lists t only; a produce to u is refused per partition.
	alice, err := client.New(client.Config{Bootstrap: c.Bootstrap(), TLS: aliceTLS, RequestTimeout: 20 * time.Second})
	require.NoError(t, err)
	defer alice.Close()
	var md []string
	require.Eventually(t, func() bool { // the ACLs reach the storage node through its metadata watch
		resp, err := alice.Metadata(ctx)
		if err != nil {
			return false
		}
		md = md[:0]
		for _, tp := range resp.GetTopics() {
			md = append(md, tp.GetName())
		}
		return len(md) == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"t"}, md)
	sconn, err := alice.Conn(storage.Addr)
	require.NoError(t, err)
	b := record.NewBuilder(record.CodecNone)
	require.NoError(t, b.Append(&record.Record{Timestamp: time.Now().UnixMilli(), Value: []byte("v")}))
	batch, err := b.Build()
	require.NoError(t, err)
	pr, err := storagev1.NewStorageServiceClient(sconn).Produce(ctx, &storagev1.ProduceRequest{Acks: storagev1.Acks_ACKS_ALL,
		Partitions: []*storagev1.ProducePartition{
			{Topic: "t", Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}},
			{Topic: "u", Data: &storagev1.ProducePartition_Batches{Batches: append([]byte(nil), batch...)}},
		}})
	require.NoError(t, err)
	require.Nil(t, pr.GetResults()[0].GetError())
	require.Equal(t, errs.TopicAuthorizationFailed, pr.GetResults()[1].GetError().GetCode())

	// Kafka: the same answers.
	kc, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(aliceTLS.Clone()), kgo.RequestRetries(0))
	require.NoError(t, err)
	defer kc.Close()
	require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("k")}).FirstErr())
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	err = kc.ProduceSync(pctx, &kgo.Record{Topic: "u", Value: []byte("k")}).FirstErr()
	pcancel()
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	mreq := kmsg.NewPtrMetadataRequest()
	mresp, err := mreq.RequestWith(ctx, kc)
	require.NoError(t, err)
	require.Len(t, mresp.Topics, 1)
	require.Equal(t, "t", *mresp.Topics[0].Topic)

	// Groups and transactional ids: no ACL, no coordinator, on either
	// protocol.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "g"
	fcr, err := fc.RequestWith(ctx, kc)
	require.NoError(t, err)
	require.Equal(t, kerr.GroupAuthorizationFailed.Code, fcr.ErrorCode)
	fc.CoordinatorType, fc.CoordinatorKey = 1, "tx"
	fcr, err = fc.RequestWith(ctx, kc)
	require.NoError(t, err)
	require.Equal(t, kerr.TransactionalIDAuthorizationFailed.Code, fcr.ErrorCode)
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.TransactionalID, ip.TransactionTimeoutMillis = kmsg.StringPtr("tx"), 10000
	// The client looks the coordinator up first and may stop there.
	ipr, err := ip.RequestWith(ctx, kc)
	if err == nil {
		err = kerr.ErrorForCode(ipr.ErrorCode)
	}
	require.ErrorIs(t, err, kerr.TransactionalIDAuthorizationFailed)
	gfc, err := groupv1.NewGroupCoordinatorServiceClient(sconn).FindCoordinator(ctx, &groupv1.FindCoordinatorRequest{Keys: []string{"g"}})
	require.NoError(t, err)
	require.Equal(t, errs.GroupAuthorizationFailed, gfc.GetCoordinators()[0].GetError().GetCode())
	_, err = txnv1.NewTransactionCoordinatorServiceClient(sconn).InitProducerId(ctx, &txnv1.InitProducerIdRequest{TransactionalId: "tx",
		TransactionTimeoutMs: 10000, ProducerId: -1, ProducerEpoch: -1})
	require.Equal(t, errs.TransactionalIDAuthorizationFailed, errs.CodeOf(err))

	// Role-to-role traffic kept working under authorization (the storage
	// node registered, follows metadata and acknowledged alice's
	// produces), and alice may not act as a process.
	aconn, err := alice.Conn(c.Controllers()[0].Addr)
	require.NoError(t, err)
	watch, err := controllerv1.NewControllerServiceClient(aconn).WatchMetadata(ctx, &controllerv1.WatchMetadataRequest{})
	require.NoError(t, err)
	_, err = watch.Recv()
	require.Equal(t, errs.ClusterAuthorizationFailed, errs.CodeOf(err), "the metadata watch (ACLs, credentials) is the processes' own")
}
