// Package client is Sluice's Go SDK: the admin client, the producer and the
// consumer, over Sluice's gRPC API. The CLI, the perf tool and the tests use
// it; applications should too.
//
//	c, err := client.New(client.Config{Bootstrap: []string{"127.0.0.1:9090"}})
//	defer c.Close()
//	cluster, err := c.DescribeCluster(ctx)
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// Telemetry is what the SDK takes of OpenTelemetry (API types only; the
// application picks the OTel SDK and exporters).
type Telemetry = wire.Telemetry

// Config configures a Client.
type Config struct {
	// Bootstrap lists host:port addresses of any Sluice nodes; the client
	// learns the rest of the cluster from them.
	Bootstrap []string
	// RequestTimeout bounds each call that has no deadline of its own,
	// retries included (default.api.timeout.ms). Default 30 s.
	RequestTimeout time.Duration
	// BootstrapTimeout bounds one attempt at one bootstrap address: a node
	// that does not answer within it (paused, cut off, a port nobody
	// serves) is passed over for the next address. Default 2 s.
	BootstrapTimeout time.Duration
	// DialOptions are added to every connection (tests dial in-process
	// servers with them).
	DialOptions []grpc.DialOption
	// Telemetry enables client spans and trace propagation; nil disables
	// them.
	Telemetry *Telemetry
	// TLS, if set, connects to every node over TLS with this configuration
	// (wire.ClientTLS builds one from PEM files); nil connects in plaintext.
	TLS *tls.Config
	// User and Password, when User is set, authenticate every call with
	// per-call credentials ("authorization: Basic ..." metadata), checked
	// by each node against the user's SCRAM credentials. They are sent
	// only over TLS: New fails without TLS.
	User, Password string
	// ClientID names the application to the cluster (Kafka's client.id):
	// it is sent with every call in the sluice-client-id metadata, and
	// client quotas (producer_byte_rate, consumer_byte_rate,
	// request_percentage) match it. Default "sluice".
	ClientID string
	// Logger receives warnings while the client retries, such as no
	// bootstrap node answering (at most one every 5 s), so a caller waiting
	// on a retry loop is not left in silence; nil discards them.
	Logger *slog.Logger
}

// Client is a connection pool to a Sluice cluster. It is safe for
// concurrent use.
type Client struct {
	cfg Config

	pool *wire.Pool

	mu sync.Mutex
	// preferred is the bootstrap address that answered last, tried first.
	preferred string
	// warned is when the last "no bootstrap node answered" warning went out.
	warned time.Time

	// groups caches each group's coordinator (coordinator.go).
	groups coordCache
	// txns caches each transactional id's coordinator (txn.go).
	txns coordCache
	// created holds the topics this client created lately (created.go).
	created createdTopics
}

// New returns a client. Connections are made lazily, on first use.
func New(cfg Config) (*Client, error) {
	if len(cfg.Bootstrap) == 0 {
		return nil, errors.New("client: at least one bootstrap address is required")
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.BootstrapTimeout == 0 {
		cfg.BootstrapTimeout = 2 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = DefaultClientID
	}
	extra := append(slices.Clip(cfg.DialOptions), clientIDOptions(cfg.ClientID)...)
	if cfg.User != "" {
		if cfg.TLS == nil {
			return nil, errors.New("client: a user and password are sent only over TLS; set Config.TLS (--tls-ca) or connect without them")
		}
		creds, err := newBasicAuth(cfg.User, cfg.Password)
		if err != nil {
			return nil, err
		}
		extra = append(slices.Clip(extra), grpc.WithPerRPCCredentials(creds))
	}
	return &Client{cfg: cfg, pool: wire.NewPool(wire.ClientOptions{Telemetry: cfg.Telemetry, TLS: cfg.TLS, Extra: extra})}, nil
}

// Close closes every connection.
func (c *Client) Close() error { return c.pool.Close() }

// Conn returns the pooled connection to addr.
func (c *Client) Conn(addr string) (*grpc.ClientConn, error) { return c.pool.Get(addr) }

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// bootstrapOrder returns the bootstrap addresses, the last one that answered
// first.
func (c *Client) bootstrapOrder() []string {
	c.mu.Lock()
	pref := c.preferred
	c.mu.Unlock()
	out := make([]string, 0, len(c.cfg.Bootstrap))
	if pref != "" {
		out = append(out, pref)
	}
	for _, a := range c.cfg.Bootstrap {
		if a != pref {
			out = append(out, a)
		}
	}
	return out
}

// anyNode calls fn on bootstrap nodes in turn until one answers with
// something other than a "try another node" error: unreachable, not ready,
// not serving the service at all, or silent for BootstrapTimeout (a paused
// node accepts connections and never answers). It makes one pass over the
// addresses; callers retry retriable failures with backoff.
func (c *Client) anyNode(ctx context.Context, fn func(ctx context.Context, conn *grpc.ClientConn) error) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var errList []error
	for _, addr := range c.bootstrapOrder() {
		conn, err := c.Conn(addr)
		if err != nil {
			errList = append(errList, err)
			continue
		}
		actx, acancel := context.WithTimeout(ctx, c.cfg.BootstrapTimeout)
		err = fn(actx, conn)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		acancel()
		if timedOut && err != nil {
			errList = append(errList, errs.New(errs.NodeUnreachable, "%s did not answer within %v", addr, c.cfg.BootstrapTimeout))
			continue
		}
		switch errs.CodeOf(err) {
		case errs.NodeUnreachable, errs.NodeNotReady, errs.Unimplemented:
			errList = append(errList, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		if err == nil {
			c.mu.Lock()
			c.preferred = addr
			c.mu.Unlock()
		}
		return err
	}
	if ctx.Err() != nil {
		errList = append(errList, ctx.Err())
	}
	err := fmt.Errorf("no bootstrap node answered: %w", errors.Join(errList...))
	c.warn("no bootstrap node answered; retrying", err)
	return err
}

// warn logs a retry warning, at most one every warnEvery.
func (c *Client) warn(msg string, err error) {
	if c.cfg.Logger == nil {
		return
	}
	c.mu.Lock()
	now := time.Now()
	due := now.Sub(c.warned) >= warnEvery
	if due {
		c.warned = now
	}
	c.mu.Unlock()
	if due {
		c.cfg.Logger.Warn(msg, slog.Any("bootstrap", c.cfg.Bootstrap), slog.String("error", err.Error()))
	}
}

const warnEvery = 5 * time.Second

func joinHostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
