// Package log builds Sluice's structured loggers on log/slog and names the
// attributes every component uses, so that log lines can be searched by
// topic, partition, node or epoch across roles.
//
// Messages are constant; the variable parts are typed attributes:
//
//	logger.Info("partition leader elected", log.TopicPartition(topic, p), log.Epoch(epoch))
package log

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Config selects the log level and format.
type Config struct {
	Level  string
	Format string
}

// RegisterFlags registers the log flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Level, "log.level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&c.Format, "log.format", "text", "Log format: text or json.")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if _, err := parseLevel(c.Level); err != nil {
		return err
	}
	switch c.Format {
	case "text", "json":
		return nil
	default:
		return fmt.Errorf("log.format: %q is not text or json", c.Format)
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("log.level: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

// New returns a logger writing to w. Every logger is passed down explicitly;
// Sluice never sets slog's default logger.
func New(c Config, w io.Writer) (*slog.Logger, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	level, _ := parseLevel(c.Level) // validated above
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h), nil
}

// Discard returns a logger that drops everything, for tests and tools.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Attribute constructors. Keep keys short and stable: they are what operators
// search for.

// Role is the role a component belongs to.
func Role(r string) slog.Attr { return slog.String("role", r) }

// Component names a part of a role.
func Component(c string) slog.Attr { return slog.String("component", c) }

// Node is the id of the node writing the log; sluiced adds it once to its
// root logger, so every line of a process carries exactly one "node".
func Node(id int32) slog.Attr { return slog.Int("node", int(id)) }

// NodeID is another node a line is about (a registering broker, the leader
// a follower fetches from). Its key is "peer", never "node": a second "node"
// key in a JSON line is a duplicate that log stores resolve differently
// (first wins, last wins, or rejected).
func NodeID(id int32) slog.Attr { return slog.Int("peer", int(id)) }

// Topic is a topic name.
func Topic(t string) slog.Attr { return slog.String("topic", t) }

// TopicPartition is a topic and partition.
func TopicPartition(topic string, partition int32) slog.Attr {
	return slog.Group("tp", slog.String("topic", topic), slog.Int("partition", int(partition)))
}

// Epoch is a leader or partition epoch.
func Epoch(e int32) slog.Attr { return slog.Int("epoch", int(e)) }

// BrokerEpoch is a node's broker epoch.
func BrokerEpoch(e int64) slog.Attr { return slog.Int64("broker_epoch", e) }

// Offset is a log offset.
func Offset(o int64) slog.Attr { return slog.Int64("offset", o) }

// Addr is a network address.
func Addr(a string) slog.Attr { return slog.String("addr", a) }

// Err is an error.
func Err(err error) slog.Attr { return slog.Any("err", err) }

// Revision is an etcd revision.
func Revision(r int64) slog.Attr { return slog.Int64("revision", r) }
