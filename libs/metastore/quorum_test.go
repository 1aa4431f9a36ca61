package metastore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/metastore/metastoretest"
)

func reachable(q metastore.QuorumStatus) (yes, no []string) {
	for _, m := range q.Members {
		if m.Reachable {
			yes = append(yes, m.Name)
		} else {
			no = append(no, m.Name)
		}
	}
	return yes, no
}

// With two of three members gone, the survivor says at once (without a
// quorum to ask) which members it reaches and that there is no majority.
func TestQuorumStatusWithoutMajority(t *testing.T) {
	stores := metastoretest.Stores(metastoretest.StartQuorum(t, 3))
	ctx := context.Background()
	require.Eventually(t, func() bool {
		q := stores[0].Quorum(ctx)
		yes, _ := reachable(q)
		return len(yes) == 3 && q.HasMajority()
	}, 10*time.Second, 10*time.Millisecond, "every member answers")

	var wg sync.WaitGroup
	for _, s := range stores[1:] {
		wg.Go(func() { require.NoError(t, s.Close()) })
	}
	wg.Wait()
	require.Eventually(t, func() bool { return !stores[0].HasLeader() }, 10*time.Second, 10*time.Millisecond)
	q := stores[0].Quorum(ctx)
	yes, no := reachable(q)
	require.Equal(t, []string{"c1"}, yes)
	require.Equal(t, []string{"c2", "c3"}, no)
	require.Equal(t, 3, q.Voters)
	require.False(t, q.HasMajority())
	require.False(t, q.Majority())
}

// Raft leadership is moved only to a member that answers: a transfer to a
// stopped member would stall the quorum for an election timeout each time.
func TestMoveLeaderAwaySkipsUnreachableMember(t *testing.T) {
	stores := metastoretest.Stores(metastoretest.StartQuorum(t, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := func() *metastore.Store {
		for _, s := range stores {
			if s.IsRaftLeader() {
				return s
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return leader() != nil }, 10*time.Second, 10*time.Millisecond)
	from := leader()
	// Stop the member an unguarded transfer would pick first: the first
	// other member in etcd's member list.
	list, err := from.Client.MemberList(ctx)
	require.NoError(t, err)
	var victim string
	for _, m := range list.Members {
		if m.Name != "" && !isSelf(t, ctx, from, m.ID) {
			victim = m.Name
			break
		}
	}
	var target *metastore.Store
	for i, s := range stores {
		if fmt.Sprintf("c%d", i+1) == victim {
			require.NoError(t, s.Close())
		} else if s != from {
			target = s
		}
	}
	require.NotNil(t, target)
	moved, err := from.MoveLeaderAway(ctx)
	require.NoError(t, err)
	require.True(t, moved)
	require.Eventually(t, target.IsRaftLeader, 10*time.Second, 10*time.Millisecond, "leadership went to the live member")
}

func isSelf(t *testing.T, ctx context.Context, s *metastore.Store, id uint64) bool {
	st, err := s.Client.Status(ctx, s.Client.Endpoints()[0])
	require.NoError(t, err)
	return st.Header.GetMemberId() == id
}

// KeepLease keeps a lease alive well past its TTL and reports its loss when
// the lease is revoked.
func TestKeepLease(t *testing.T) {
	cfg := metastoretest.Config(t)
	st, err := metastore.Open(context.Background(), cfg, "c1", t.TempDir(), log.Discard())
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sent := time.Now()
	grant, err := st.Client.Grant(ctx, 1)
	require.NoError(t, err)
	lost := make(chan error, 1)
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	go st.KeepLease(kctx, grant.ID, sent, time.Duration(grant.TTL)*time.Second, func(err error) { lost <- err })

	// Not a condition to poll for: the lease must outlive its TTL several
	// times over.
	time.Sleep(3 * time.Duration(grant.TTL) * time.Second)
	ttl, err := st.Client.TimeToLive(ctx, grant.ID)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ttl.TTL, int64(0), "the lease is alive (-1: expired)")
	require.Empty(t, lost)

	_, err = st.Client.Revoke(ctx, grant.ID)
	require.NoError(t, err)
	select {
	case err := <-lost:
		require.ErrorIs(t, err, metastore.ErrLeaseLost)
	case <-ctx.Done():
		t.Fatal("the revoked lease was not reported lost")
	}
}
