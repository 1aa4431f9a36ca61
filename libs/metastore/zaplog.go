package metastore

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns a zap logger that forwards etcd's warnings and errors to
// our slog logger; etcd's info chatter (raft ticks, snapshots) is dropped, as
// are the listener errors etcd reports while it is being closed on purpose.
func zapToSlog(l *slog.Logger, closing *atomic.Bool) *zap.Logger {
	return zap.New(&slogCore{l: l, min: zapcore.WarnLevel, closing: closing})
}

// benign lists etcd warnings that describe how Sluice deliberately runs
// etcd (private, loopback-only, one port for gRPC and HTTP) rather than a
// problem.
var benign = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

type slogCore struct {
	l       *slog.Logger
	min     zapcore.Level
	fields  []zapcore.Field
	closing *atomic.Bool
}

func (c *slogCore) Enabled(lvl zapcore.Level) bool { return lvl >= c.min }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{l: c.l, min: c.min, closing: c.closing, fields: append(append([]zapcore.Field{}, c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if benign[e.Message] || c.closing.Load() {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	attrs = append(attrs, slog.String("component", "etcd"))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	lvl := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		lvl = slog.LevelError
	}
	c.l.LogAttrs(context.Background(), lvl, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
