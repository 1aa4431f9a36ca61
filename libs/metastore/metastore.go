// Package metastore is the controller's metadata store: an embedded etcd
// member (one by default, three or five for production, bootstrapped
// statically from flags) or a client of an external etcd cluster. Only the
// controller role uses it; other roles learn metadata from the controller
// over gRPC, so etcd stays small, private and replaceable.
//
//	st, err := metastore.Open(ctx, cfg, dataDir, logger)
//	defer st.Close()
//	resp, err := st.Client.Get(ctx, st.Key("cluster/id"))
package metastore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/sluice-io/sluice/libs/role"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// MaxTxnOps is the most operations the embedded etcd accepts in one
// transaction. An external etcd needs --max-txn-ops at least this large for
// topics with more than 120 partitions.
const MaxTxnOps = 10240

// Store is an open metadata store.
type Store struct {
	// Client talks to the etcd cluster (through the local member when
	// embedded).
	Client *clientv3.Client

	cfg    Config
	name   string
	etcd   *embed.Etcd // nil when external
	logger *slog.Logger
	failed chan error

	closeOnce sync.Once
	closing   atomic.Bool
}

// Open starts the embedded member (and waits until it has joined its quorum)
// or connects to the external cluster.
func Open(ctx context.Context, cfg Config, name, dataDir string, logger *slog.Logger) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name != "" {
		name = cfg.Name
	}
	s := &Store{cfg: cfg, name: name, logger: logger, failed: make(chan error, 1)}
	endpoints := cfg.endpoints()
	if cfg.Embedded() {
		if err := s.startEmbedded(ctx, dataDir); err != nil {
			return nil, err
		}
		endpoints = []string{cfg.scheme() + "://" + cfg.ClientListen}
	}
	var clientTLS *tls.Config
	if cfg.TLS != nil && cfg.Embedded() {
		clientTLS = cfg.TLS.Client
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         clientTLS,
		DialTimeout: cfg.DialTimeout,
		Logger:      zap.NewNop(), // client retries are reported by our own callers
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		s.stopEmbedded()
		return nil, fmt.Errorf("connecting to etcd at %v: %w", endpoints, err)
	}
	s.Client = client
	if !cfg.Embedded() {
		// Fail fast on an unreachable external cluster instead of at the
		// first write.
		sctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
		defer cancel()
		if _, err := client.Get(sctx, s.Key("cluster/id")); err != nil {
			_ = client.Close() // the connection failure is the error worth reporting
			return nil, fmt.Errorf("reading from external etcd at %v: %w", endpoints, err)
		}
	}
	return s, nil
}

func (s *Store) startEmbedded(ctx context.Context, dataDir string) error {
	ec := embed.NewConfig()
	ec.Name = s.name
	ec.Dir = filepath.Join(dataDir, "etcd")
	if err := os.MkdirAll(ec.Dir, 0o700); err != nil {
		return fmt.Errorf("creating etcd data dir: %w", err)
	}
	clientURL, err := url.Parse(s.cfg.scheme() + "://" + s.cfg.ClientListen)
	if err != nil {
		return fmt.Errorf("etcd client-listen: %w", err)
	}
	peerURL, err := url.Parse(s.cfg.scheme() + "://" + s.cfg.PeerListen)
	if err != nil {
		return fmt.Errorf("etcd peer-listen: %w", err)
	}
	if t := s.cfg.TLS; t != nil {
		// Clients (the controllers) and peers must present a certificate
		// the CA signed: etcd holds every secret of the cluster's metadata.
		info := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ClientCertAuth: true}
		// And a controller's: any other certificate the CA signed (a
		// client's, a storage node's) would otherwise read and write
		// every key. etcd checks certificates by name only, so the
		// controller role is required by its DNS SAN
		// (tlsx.RoleDNSName), which certificates issued by tlsx carry. A
		// member whose own certificate lacks it (issued elsewhere, or
		// before) keeps the CA-only check, with a warning, rather than
		// lock itself out.
		own, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return fmt.Errorf("etcd TLS: loading the member's certificate: %w", err)
		}
		if cert, err := x509.ParseCertificate(own.Certificate[0]); err == nil && tlsx.HasRoleDNSName(cert, string(role.Controller)) {
			info.AllowedHostnames = []string{tlsx.RoleDNSName(string(role.Controller))}
		} else {
			s.logger.Warn("etcd accepts every certificate the CA signed: the controller certificate does not carry the controller role DNS name; reissue it (sluice certs) to restrict etcd to controllers",
				slog.String("dns_name", tlsx.RoleDNSName(string(role.Controller))))
		}
		ec.ClientTLSInfo, ec.PeerTLSInfo = info, info
	}
	advClientURL, advURL := clientURL, peerURL
	if s.cfg.ClientAdvertise != "" {
		if advClientURL, err = url.Parse(s.cfg.scheme() + "://" + s.cfg.ClientAdvertise); err != nil {
			return fmt.Errorf("etcd client-advertise: %w", err)
		}
	}
	if s.cfg.PeerAdvertise != "" {
		if advURL, err = url.Parse(s.cfg.scheme() + "://" + s.cfg.PeerAdvertise); err != nil {
			return fmt.Errorf("etcd peer-advertise: %w", err)
		}
	}
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*advClientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*advURL}
	ec.InitialCluster = s.cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = s.name + "=" + advURL.String()
	}
	ec.InitialClusterToken = s.cfg.ClusterToken
	ec.ClusterState = embed.ClusterStateFlagNew // ignored once the data dir holds a member
	ec.TickMs = s.cfg.TickMs
	ec.ElectionMs = s.cfg.ElectionMs
	ec.UnsafeNoFsync = s.cfg.UnsafeNoFsync
	ec.QuotaBackendBytes = s.cfg.QuotaBackendBytes
	ec.WalDir = s.cfg.WalDir
	// Keep one hour of history: metadata watchers that fall further behind
	// get a fresh snapshot.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"
	// A topic is created or deleted in one transaction with one operation
	// per partition.
	ec.MaxTxnOps = MaxTxnOps
	ec.MaxRequestBytes = 8 << 20
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapToSlog(s.logger, &s.closing))

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("starting embedded etcd member %s: %w", s.name, err)
	}
	timer := time.NewTimer(s.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedded etcd member %s failed while starting: %w", s.name, err)
	case <-timer.C:
		e.Server.HardStop()
		e.Close()
		return fmt.Errorf("embedded etcd member %s did not join its quorum within %v (are the other members of %q up?)",
			s.name, s.cfg.StartTimeout, ec.InitialCluster)
	case <-ctx.Done():
		e.Server.HardStop()
		e.Close()
		return fmt.Errorf("starting embedded etcd member %s: %w", s.name, ctx.Err())
	}
	s.etcd = e
	go func() {
		// Err yields when a listener fails; the process cannot serve
		// metadata without it.
		if err, ok := <-e.Err(); ok && err != nil {
			select {
			case s.failed <- fmt.Errorf("embedded etcd: %w", err):
			default:
			}
		}
	}()
	s.logger.Info("embedded etcd member ready", slog.String("member", s.name),
		slog.String("client", s.cfg.ClientListen), slog.String("peer", s.cfg.PeerListen))
	return nil
}

// Key returns the full etcd key for a path under the store's prefix.
func (s *Store) Key(path string) string { return s.cfg.Prefix + "/" + path }

// Prefix returns the store's key prefix with a trailing slash.
func (s *Store) Prefix() string { return s.cfg.Prefix + "/" }

// MemberName is this member's name (empty when etcd is external).
func (s *Store) MemberName() string {
	if s.etcd == nil {
		return ""
	}
	return s.name
}

// IsRaftLeader reports whether the local embedded member leads the etcd
// quorum.
func (s *Store) IsRaftLeader() bool {
	return s.etcd != nil && s.etcd.Server.Leader() == s.etcd.Server.MemberID()
}

// MoveLeaderAway transfers raft leadership from the local embedded member
// to another member, if the local one leads and another member is fit to
// take it. It returns whether it moved. The active controller calls it: when
// the process that hosts both the active controller and the raft leader
// dies, the quorum must first elect a raft leader, and etcd then extends
// every lease (including the dead controller's election lease) by a full
// TTL, which doubles the controller failover time.
//
// Only a member that answers a status probe and has the committed log is
// fit: a transfer to a paused or lagging member stalls every proposal until
// raft gives the transfer up after an election timeout, and repeating that
// keeps the quorum from serving at all.
func (s *Store) MoveLeaderAway(ctx context.Context) (bool, error) {
	if !s.IsRaftLeader() {
		return false, nil
	}
	q := s.Quorum(ctx)
	var self uint64
	for _, m := range q.Members {
		if m.Self {
			self = m.RaftIndex
		}
	}
	var to *MemberStatus
	for i, m := range q.Members {
		if m.Self || m.Learner || !m.Reachable || m.RaftIndex+maxTransferLag < self {
			continue
		}
		if to == nil || m.RaftIndex > to.RaftIndex {
			to = &q.Members[i]
		}
	}
	if to == nil {
		return false, nil
	}
	// A transfer to a caught-up member takes a few heartbeats; bound it so a
	// member that stops answering meanwhile does not hold the caller.
	mctx, cancel := context.WithTimeout(ctx, 2*s.ElectionTimeout())
	defer cancel()
	if _, err := s.Client.MoveLeader(mctx, to.ID); err != nil {
		return false, fmt.Errorf("moving etcd leadership to %s: %w", to.Name, err)
	}
	return true, nil
}

// maxTransferLag is how many committed entries a member may lag behind the
// leader and still be handed raft leadership; raft sends it the rest before
// the transfer completes.
const maxTransferLag = 1000

// Member describes one etcd member.
type Member struct {
	Name      string
	PeerURLs  []string
	ClientURL string
	IsLeader  bool
}

// Members lists the etcd cluster's members and which one leads.
func (s *Store) Members(ctx context.Context) ([]Member, error) {
	resp, err := s.Client.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	var leader uint64
	if s.etcd != nil {
		leader = uint64(s.etcd.Server.Leader())
	} else if len(s.cfg.endpoints()) > 0 {
		st, err := s.Client.Status(ctx, s.cfg.endpoints()[0])
		if err == nil {
			leader = st.Leader
		}
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		mm := Member{Name: m.Name, PeerURLs: m.PeerURLs, IsLeader: m.ID == leader}
		if len(m.ClientURLs) > 0 {
			mm.ClientURL = m.ClientURLs[0]
		}
		out = append(out, mm)
	}
	return out, nil
}

// Failed yields if the embedded member fails after starting.
func (s *Store) Failed() <-chan error { return s.failed }

// Close closes the client and stops the embedded member.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		if s.Client != nil {
			err = s.Client.Close()
			if errors.Is(err, context.Canceled) {
				err = nil
			}
		}
		s.stopEmbedded()
	})
	return err
}

func (s *Store) stopEmbedded() {
	if s.etcd == nil {
		return
	}
	// Close transfers raft leadership away when this member leads, so the
	// rest of the quorum does not wait for an election timeout. It also
	// waits for client requests in flight; if one waits for a quorum that is
	// gone (the other members stopped first), it would hold Close for etcd's
	// whole request timeout. Stopping raft makes such requests fail at once.
	done := make(chan struct{})
	go func() {
		s.etcd.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		s.etcd.Server.HardStop()
		<-done
	}
}
