package kafka

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// Config tunes the Kafka listener. The listen and advertise addresses are
// the node's (config.Node); these are the limits every connection gets.
type Config struct {
	// MaxRequestBytes bounds one request frame (Kafka's
	// socket.request.max.bytes). A larger size prefix closes the
	// connection before anything is allocated for the frame.
	MaxRequestBytes int
	// MaxQueuedRequestBytes bounds the bytes of request frames the
	// process holds at once over all connections, from reading a frame
	// until its answer is ready (Kafka's queued.max.request.bytes); a
	// connection waits, unread, while it is spent. At least
	// MaxRequestBytes.
	MaxQueuedRequestBytes int64
	// IdleTimeout closes a connection that sent nothing and awaits no
	// response for this long (Kafka's connections.max.idle.ms).
	IdleTimeout time.Duration
	// RequestTimeout is the deadline of each request's context: handlers
	// and their Reply.Wait must answer within it. A handler may use a
	// tighter one from the request (Produce's TimeoutMillis).
	RequestTimeout time.Duration
	// MaxPendingResponses bounds the requests of one connection that are
	// answered but not yet written (waiting on a Reply.Wait or on an
	// earlier response); the connection reads no further request until
	// one is written, so a client that pipelines without end cannot queue
	// unbounded memory.
	MaxPendingResponses int
	// SASLMechanisms are the SASL mechanisms the listener requires a
	// client to authenticate with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512);
	// empty: no SASL. Comma-separated on the command line.
	SASLMechanisms string
	// SASLSessionLifetime is the longest a SASL authentication lasts before
	// the client must reauthenticate on its connection (KIP-368, Kafka's
	// connections.max.reauth.ms); zero: no limit.
	SASLSessionLifetime time.Duration
	// SASLAllowPlainWithoutTLS lets SASL/PLAIN run on a listener without
	// TLS, where passwords cross the network in clear text. Without it a
	// process with PLAIN among SASLMechanisms and no TLS refuses to start.
	SASLAllowPlainWithoutTLS bool
}

// DefaultConfig returns the defaults the flags have.
func DefaultConfig() Config {
	return Config{
		MaxRequestBytes:       100 << 20,
		MaxQueuedRequestBytes: 512 << 20,
		IdleTimeout:           10 * time.Minute,
		RequestTimeout:        30 * time.Second,
		MaxPendingResponses:   16,
	}
}

// RegisterFlags registers the listener flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.IntVar(&c.MaxRequestBytes, "kafka.max-request-bytes", d.MaxRequestBytes,
		"Largest Kafka request frame accepted, in bytes (Kafka's socket.request.max.bytes); a larger one closes the connection.")
	fs.Int64Var(&c.MaxQueuedRequestBytes, "kafka.max-queued-request-bytes", d.MaxQueuedRequestBytes,
		"Bytes of Kafka request frames held at once over all connections, until answered (Kafka's queued.max.request.bytes); connections wait while it is spent.")
	fs.DurationVar(&c.IdleTimeout, "kafka.idle-timeout", d.IdleTimeout,
		"Close a Kafka connection idle for this long (Kafka's connections.max.idle.ms).")
	fs.DurationVar(&c.RequestTimeout, "kafka.request-timeout", d.RequestTimeout,
		"Deadline for answering one Kafka request, waits included.")
	fs.IntVar(&c.MaxPendingResponses, "kafka.max-pending-responses", d.MaxPendingResponses,
		"Requests of one Kafka connection answered but not yet written; the connection reads no more until one is written.")
	fs.StringVar(&c.SASLMechanisms, "kafka.sasl.mechanisms", "",
		"Comma-separated SASL mechanisms Kafka clients must authenticate with: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (empty: no SASL; a client certificate also authenticates).")
	fs.DurationVar(&c.SASLSessionLifetime, "kafka.sasl.session-lifetime", 0,
		"Longest a SASL authentication lasts before the client must reauthenticate on its connection (KIP-368, Kafka's connections.max.reauth.ms); 0 = no limit.")
	fs.BoolVar(&c.SASLAllowPlainWithoutTLS, "kafka.sasl.allow-plain-without-tls", false,
		"Allow SASL/PLAIN on a Kafka listener without TLS, where passwords travel in clear text (for tests on a trusted network only). Without it sluiced refuses to start with PLAIN and no --tls.cert.")
}

// PlainWithoutTLSError is the startup error of a process whose Kafka
// listener would take SASL/PLAIN passwords in clear text: PLAIN is among
// the mechanisms, tls says whether the listener serves TLS, and the
// opt-in flag is not set. Nil when the configuration is safe or opted in.
func (c *Config) PlainWithoutTLSError(tls bool) error {
	if tls || c.SASLAllowPlainWithoutTLS {
		return nil
	}
	for _, m := range c.Mechanisms() {
		if m == MechanismPlain {
			return errors.New("kafka.sasl.mechanisms: PLAIN on a Kafka listener without TLS would send passwords in clear text; " +
				"set --tls.cert and --tls.key, use SCRAM-SHA-256 or SCRAM-SHA-512 instead, or pass --kafka.sasl.allow-plain-without-tls to accept it")
		}
	}
	return nil
}

// Mechanisms returns the SASL mechanisms, validated and upper-cased.
func (c *Config) Mechanisms() []string {
	ms, _ := ValidateMechanisms(strings.Split(c.SASLMechanisms, ","))
	return ms
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxRequestBytes < 1<<10 || c.MaxRequestBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("kafka.max-request-bytes: %d is outside 1 KiB..1 GiB", c.MaxRequestBytes))
	}
	if c.MaxQueuedRequestBytes < int64(c.MaxRequestBytes) {
		errs = append(errs, fmt.Errorf("kafka.max-queued-request-bytes: %d is below kafka.max-request-bytes (%d)", c.MaxQueuedRequestBytes, c.MaxRequestBytes))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("kafka.idle-timeout: %v must be positive", c.IdleTimeout))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("kafka.request-timeout: %v must be positive", c.RequestTimeout))
	}
	if c.MaxPendingResponses < 1 || c.MaxPendingResponses > 1024 {
		errs = append(errs, fmt.Errorf("kafka.max-pending-responses: %d is outside 1..1024", c.MaxPendingResponses))
	}
	if _, err := ValidateMechanisms(strings.Split(c.SASLMechanisms, ",")); err != nil {
		errs = append(errs, fmt.Errorf("kafka.sasl.mechanisms: %w", err))
	}
	if c.SASLSessionLifetime < 0 || (c.SASLSessionLifetime > 0 && c.SASLSessionLifetime < time.Second) {
		errs = append(errs, fmt.Errorf("kafka.sasl.session-lifetime: %v must be 0 or at least 1s", c.SASLSessionLifetime))
	}
	return errors.Join(errs...)
}

// withDefaults fills zero fields with the defaults, so a Config built in
// code needs only what it changes.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.MaxQueuedRequestBytes == 0 {
		c.MaxQueuedRequestBytes = d.MaxQueuedRequestBytes
	}
	// A frame larger than the whole budget could never be read.
	c.MaxQueuedRequestBytes = max(c.MaxQueuedRequestBytes, int64(c.MaxRequestBytes))
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.MaxPendingResponses == 0 {
		c.MaxPendingResponses = d.MaxPendingResponses
	}
	return c
}
