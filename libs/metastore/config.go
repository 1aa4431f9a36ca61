package metastore

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config configures the controller's metadata store: an embedded etcd member
// (the default) or a client of an external etcd cluster.
type Config struct {
	// Name is this member's name in the etcd cluster; empty derives it from
	// the node id.
	Name string
	// ClientListen is host:port where the embedded member serves etcd
	// clients (only Sluice controllers use it).
	ClientListen string
	// ClientAdvertise is host:port the other members' controllers reach
	// this member's client listener at (the quorum status probes it);
	// empty uses ClientListen.
	ClientAdvertise string
	// PeerListen is host:port where the embedded member talks to its peers.
	PeerListen string
	// PeerAdvertise is host:port the other members dial to reach this one;
	// empty uses PeerListen. etcd binds only to IP addresses, so a member
	// that listens on a wildcard address (a container's 0.0.0.0) advertises
	// its name here (controller-1:9094).
	PeerAdvertise string
	// InitialCluster lists every member for a static bootstrap as
	// name=http://host:port,... Empty means a single-member cluster of this
	// member only.
	InitialCluster string
	// ClusterToken distinguishes clusters bootstrapped on the same hosts.
	ClusterToken string
	// Endpoints, if set, uses an external etcd cluster instead of an embedded
	// member.
	Endpoints string
	// Prefix is prepended to every key, so several Sluice clusters can share
	// an external etcd.
	Prefix string
	// DialTimeout bounds connecting to etcd.
	DialTimeout time.Duration
	// StartTimeout bounds how long the embedded member may take to join its
	// quorum. Under heavy disk load etcd can take 10 s or more.
	StartTimeout time.Duration

	// QuotaBackendBytes caps the embedded member's database (bbolt) file;
	// past it etcd raises a NOSPACE alarm and refuses writes until the
	// alarm is disarmed. Zero keeps etcd's default, 2 GiB.
	QuotaBackendBytes int64
	// WalDir, if set, puts the embedded member's write-ahead log in its own
	// directory (ideally its own file system) instead of under the data
	// directory. Each WAL segment is preallocated at 64 MB, and the next is
	// preallocated before the current one fills.
	WalDir string

	// TLS, when set, serves the embedded member's client and peer traffic
	// over TLS (https URLs) and connects to it with TLS. The process sets
	// it from its --tls.* flags; it has no flags of its own.
	TLS *TLS

	// Tuning for tests: shorter raft ticks and no fsync. Never in production.
	TickMs        uint
	ElectionMs    uint
	UnsafeNoFsync bool
}

// TLS is the TLS identity of an embedded etcd member and of its client.
type TLS struct {
	// CertFile and KeyFile are the member's certificate (serving clients
	// and peers, and presented to peers as client certificate) and key;
	// etcd reads them again at every handshake, so a replaced certificate
	// is used by new connections. CAFile verifies clients and peers; etcd
	// reads it once, at start.
	CertFile, KeyFile, CAFile string
	// Client is the configuration the Sluice controller connects to the
	// member with (its certificate as client certificate).
	Client *tls.Config
}

// RegisterFlags registers the flags under prefix (for example
// "controller.etcd.").
func (c *Config) RegisterFlags(prefix string, fs *flag.FlagSet) {
	fs.StringVar(&c.Name, prefix+"name", "", "Name of this embedded etcd member; empty uses controller-<node-id>.")
	fs.StringVar(&c.ClientListen, prefix+"client-listen", "127.0.0.1:9092", "host:port where the embedded etcd member serves clients.")
	fs.StringVar(&c.PeerListen, prefix+"peer-listen", "127.0.0.1:9093", "host:port where the embedded etcd member talks to its peers.")
	fs.StringVar(&c.ClientAdvertise, prefix+"client-advertise", "",
		"host:port other controllers reach this member's client listener at; empty uses --"+prefix+"client-listen.")
	fs.StringVar(&c.PeerAdvertise, prefix+"peer-advertise", "",
		"host:port the other members dial to reach this one, as named in --"+prefix+"initial-cluster; empty uses --"+prefix+"peer-listen (which must be an IP address).")
	fs.StringVar(&c.InitialCluster, prefix+"initial-cluster", "",
		"Static bootstrap of a multi-member quorum: name=http://host:port,... (peer addresses). Empty starts a single member.")
	fs.StringVar(&c.ClusterToken, prefix+"cluster-token", "sluice", "Token that tells apart etcd clusters bootstrapped on the same hosts.")
	fs.StringVar(&c.Endpoints, prefix+"endpoints", "", "Comma-separated endpoints of an external etcd cluster to use instead of an embedded member.")
	fs.StringVar(&c.Prefix, prefix+"prefix", "/sluice", "Key prefix in etcd, so clusters can share an external etcd.")
	fs.DurationVar(&c.DialTimeout, prefix+"dial-timeout", 5*time.Second, "Timeout for connecting to etcd.")
	fs.DurationVar(&c.StartTimeout, prefix+"start-timeout", 60*time.Second, "How long the embedded member may take to join its quorum.")
	fs.Int64Var(&c.QuotaBackendBytes, prefix+"quota-backend-bytes", 0,
		"Largest size of the embedded etcd database file; past it etcd refuses metadata writes (NOSPACE alarm). 0 is etcd's default, 2 GiB.")
	fs.StringVar(&c.WalDir, prefix+"wal-dir", "",
		"Directory for the embedded etcd write-ahead log (64 MB preallocated segments, two at a time); empty keeps it under the data directory.")
	fs.UintVar(&c.TickMs, prefix+"tick-ms", 100, "etcd heartbeat interval in milliseconds.")
	fs.UintVar(&c.ElectionMs, prefix+"election-ms", 1000, "etcd election timeout in milliseconds.")
	fs.BoolVar(&c.UnsafeNoFsync, prefix+"unsafe-no-fsync", false, "Disable etcd's fsync. Loses metadata on power failure: for tests only.")
}

// Embedded reports whether an embedded member is configured.
func (c *Config) Embedded() bool { return c.Endpoints == "" }

// Validate checks the configuration.
func (c *Config) Validate() error {
	if !c.Embedded() {
		for _, ep := range c.endpoints() {
			if _, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")); err != nil {
				return fmt.Errorf("etcd endpoints: %q is not host:port: %w", ep, err)
			}
		}
		return nil
	}
	for name, addr := range map[string]string{"client-listen": c.ClientListen, "peer-listen": c.PeerListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("etcd %s: %q is not host:port: %w", name, addr, err)
		}
	}
	for name, addr := range map[string]string{"client-advertise": c.ClientAdvertise, "peer-advertise": c.PeerAdvertise} {
		if addr == "" {
			continue
		}
		if h, _, err := net.SplitHostPort(addr); err != nil || h == "" || net.ParseIP(h).IsUnspecified() {
			return fmt.Errorf("etcd %s: %q must be host:port with a host the other members can dial", name, addr)
		}
	}
	if c.InitialCluster != "" {
		if _, err := parseInitialCluster(c.InitialCluster); err != nil {
			return err
		}
	}
	if c.ElectionMs < 5*c.TickMs {
		return fmt.Errorf("etcd election-ms (%d) must be at least 5 times tick-ms (%d)", c.ElectionMs, c.TickMs)
	}
	if c.QuotaBackendBytes < 0 {
		return fmt.Errorf("etcd quota-backend-bytes: %d is negative", c.QuotaBackendBytes)
	}
	if c.TLS != nil && strings.Contains(c.InitialCluster, "http://") {
		return fmt.Errorf("etcd initial-cluster: with TLS every peer URL must be https://, got %q", c.InitialCluster)
	}
	if !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("etcd prefix %q must start with /", c.Prefix)
	}
	return nil
}

func (c *Config) endpoints() []string {
	var out []string
	for _, ep := range strings.Split(c.Endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			out = append(out, ep)
		}
	}
	return out
}

// parseInitialCluster checks name=url pairs and returns the member names.
func parseInitialCluster(s string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, raw, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("etcd initial-cluster: %q is not name=http://host:port", part)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("etcd initial-cluster: %q has no valid http(s)://host:port URL", part)
		}
		if seen[name] {
			return nil, fmt.Errorf("etcd initial-cluster: member %q appears twice", name)
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, nil
}

func (c *Config) scheme() string {
	if c.TLS != nil {
		return "https"
	}
	return "http"
}
