package metastore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-io/sluice/libs/log"
)

// ErrLeaseLost is the cause KeepLease reports when the lease is gone or can
// no longer be shown to be alive.
var ErrLeaseLost = errors.New("etcd lease lost")

// KeepLease renews a lease until ctx ends or the lease is lost; it then
// calls lost with the reason (wrapping ErrLeaseLost) and returns. granted is
// when the Grant request was sent and ttl the TTL etcd granted.
//
// It renews with one request at a time, each on a fresh stream and bounded
// in time, instead of clientv3's keep-alive stream. That stream is the wrong
// tool for a lease whose loss ends a controller's term: while the raft
// leader is paused, the local member's forwarded renewal hangs for etcd's
// whole request timeout (longer than the TTL), the stream answers nothing,
// and the client declares the lease expired although no leader ever expired
// it (a new raft leader even renews every lease by a full TTL when it takes
// over). The active controller then resigned on every raft election, and
// revoked its lease doing so.
//
// The lease counts as alive until TTL after the last answered renewal was
// sent. Past that, it is kept only while the quorum is electing a raft
// leader, because no leader can expire a lease meanwhile:
//   - the local member's raft term moved since the last answered renewal: a
//     new leader gives every lease a full TTL (plus an election timeout)
//     when it takes over, so the lease lives at least TTL after this
//     member saw the new term;
//   - the raft leader the local member follows does not answer, or there is
//     none: an election is due within two election timeouts.
//
// A renewal answered "not found" ends the lease at once.
func (s *Store) KeepLease(ctx context.Context, id clientv3.LeaseID, granted time.Time, ttl time.Duration, lost func(error)) {
	interval := max(ttl/3, 100*time.Millisecond)
	election := s.ElectionTimeout()
	if election == 0 {
		election = time.Second // an external etcd's default
	}
	deadline := granted.Add(ttl) // the lease lives at least until then
	term := s.RaftTerm()         // raft term at the last answered renewal
	var termSeen time.Time       // when the term was first seen to move
	var leaderSilent time.Time   // when the leader was first found not answering
	var lastErr error
	wait := interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, interval)
		resp, err := s.Client.KeepAliveOnce(actx, id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
			term, termSeen, leaderSilent, lastErr = s.RaftTerm(), time.Time{}, time.Time{}, nil
			wait = interval
			continue
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			lost(fmt.Errorf("%w: lease %x expired or was revoked", ErrLeaseLost, id))
			return
		}
		if lastErr == nil {
			s.logger.Debug("etcd lease renewal failed; retrying", slog.String("lease", fmt.Sprintf("%x", id)), log.Err(err))
		}
		lastErr, wait = err, 50*time.Millisecond
		now := time.Now()
		if now.Before(deadline) {
			continue
		}
		if t := s.RaftTerm(); t != term {
			if termSeen.IsZero() {
				termSeen = now
			}
			if now.Before(termSeen.Add(ttl)) {
				continue
			}
		} else if !s.leaderAnswers(ctx) {
			if leaderSilent.IsZero() {
				leaderSilent = now
			}
			if now.Before(leaderSilent.Add(2 * election)) {
				continue
			}
		}
		lost(fmt.Errorf("%w: no renewal of lease %x answered for %v (last error: %v)", ErrLeaseLost, id,
			now.Sub(deadline.Add(-ttl)).Round(time.Millisecond), lastErr))
		return
	}
}

// leaderAnswers reports whether the raft leader the local member follows
// answers a status probe. For an external etcd, whose raft this process
// does not see, it reports true.
func (s *Store) leaderAnswers(ctx context.Context) bool {
	if s.etcd == nil {
		return true
	}
	leader := s.etcd.Server.Leader()
	if leader == 0 {
		return false
	}
	if leader == s.etcd.Server.MemberID() {
		return true
	}
	m := s.etcd.Server.Cluster().Member(leader)
	if m == nil || len(m.ClientURLs) == 0 {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if !accepts(pctx, m.ClientURLs[0]) {
		return false
	}
	_, err := s.Client.Status(pctx, m.ClientURLs[0])
	return err == nil
}
