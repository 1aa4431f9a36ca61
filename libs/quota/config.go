package quota

import (
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Config is a process's quota enforcement settings (sluiced's --quota.*
// flags, Kafka's broker settings by their names). The quotas themselves
// are cluster metadata (sluice quota, AlterClientQuotas).
type Config struct {
	// WindowNum is Kafka's quota.window.num (--quota.window-num).
	WindowNum int
	// WindowSize is Kafka's quota.window.size.seconds
	// (--quota.window-size).
	WindowSize time.Duration
	// MaxConnectionsPerIP is Kafka's max.connections.per.ip
	// (--quota.max-connections-per-ip); 0 is no limit.
	MaxConnectionsPerIP int
	// MaxConnectionsPerIPOverrides is Kafka's
	// max.connections.per.ip.overrides: "ip:count,ip:count"
	// (--quota.max-connections-per-ip-overrides).
	MaxConnectionsPerIPOverrides string
}

// RegisterFlags registers the --quota.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.WindowNum, "quota.window-num", 11,
		"Samples a client's rate is measured over (Kafka's quota.window.num).")
	fs.DurationVar(&c.WindowSize, "quota.window-size", time.Second,
		"Span of one rate sample (Kafka's quota.window.size.seconds); the longest throttle time answered is the whole window, window-num samples.")
	fs.IntVar(&c.MaxConnectionsPerIP, "quota.max-connections-per-ip", 0,
		"Most client connections open at once from one IP address, on the Kafka listener and the gRPC listener each (Kafka's max.connections.per.ip); 0: no limit. A connection over it is closed at once.")
	fs.StringVar(&c.MaxConnectionsPerIPOverrides, "quota.max-connections-per-ip-overrides", "",
		"Per-address exceptions to --quota.max-connections-per-ip, as ip:count pairs separated by commas, such as \"10.0.0.5:500,::1:0\" (Kafka's max.connections.per.ip.overrides; 0: no limit).")
}

// Validate checks the settings.
func (c *Config) Validate() error {
	if c.WindowNum < 2 {
		return fmt.Errorf("quota.window-num must be at least 2, not %d", c.WindowNum)
	}
	if c.WindowSize < 10*time.Millisecond {
		return fmt.Errorf("quota.window-size must be at least 10ms, not %v", c.WindowSize)
	}
	if c.MaxConnectionsPerIP < 0 {
		return fmt.Errorf("quota.max-connections-per-ip must not be negative, not %d", c.MaxConnectionsPerIP)
	}
	_, err := parseOverrides(c.MaxConnectionsPerIPOverrides)
	return err
}

// New returns the process's Manager.
func (c *Config) New(logger *slog.Logger, mp metric.MeterProvider) *Manager {
	overrides, _ := parseOverrides(c.MaxConnectionsPerIPOverrides) // validated
	return NewManager(Options{
		WindowNum: c.WindowNum, WindowSize: c.WindowSize, Logger: logger, Metrics: NewMetrics(mp),
		MaxConnectionsPerIP: c.MaxConnectionsPerIP, MaxConnectionsPerIPOverrides: overrides,
	})
}

// parseOverrides parses "ip:count,ip:count"; the count follows the last
// colon, so IPv6 addresses need no brackets.
func parseOverrides(s string) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.LastIndexByte(part, ':')
		if i < 0 {
			return nil, fmt.Errorf("quota.max-connections-per-ip-overrides: %q is not ip:count", part)
		}
		addr, err := netip.ParseAddr(strings.Trim(part[:i], "[]"))
		if err != nil {
			return nil, fmt.Errorf("quota.max-connections-per-ip-overrides: %q: %w", part, err)
		}
		n, err := strconv.Atoi(part[i+1:])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("quota.max-connections-per-ip-overrides: %q: the count must be a number, 0 or more", part)
		}
		out[addr.Unmap()] = n
	}
	return out, nil
}
