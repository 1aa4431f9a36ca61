package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/log"
)

// conn is one client connection. Its reader reads a frame, decodes it and
// calls the handler, then reads the next; each request gets a slot in
// pending, in request order, and the writer writes the slots' frames in
// that order as they become ready. A Reply.Wait fills its slot from a
// goroutine of its own. pending's capacity bounds the requests answered
// but not yet written: when it is full the reader waits.
type conn struct {
	s      *Server
	nc     net.Conn
	info   *Conn
	logger *slog.Logger
	// br reads requests; it holds a buffer only while it has bytes not
	// yet read (see readBufferSize).
	br *wire.ReadyReader

	ctx    context.Context
	cancel context.CancelFunc
	// idCtx is ctx carrying the connection's auth.Identity: the parent of
	// every request's context. Set before the first request is read and
	// read only by the reader.
	idCtx context.Context
	// sasl is the connection's SASL authentication (see sasl.go).
	sasl saslState

	pending chan *slot
	// mutedUntil is when the connection's quota throttle ends (unix ns):
	// the reader handles no request before it (see quota.go).
	mutedUntil atomic.Int64
	// outstanding counts slots queued and not yet written: a connection
	// with any is not idle.
	outstanding atomic.Int32

	mu       sync.Mutex
	stopping bool // set by Server.Stop: read no further request
	// stop is closed with stopping set, waking a reader that waits for
	// the request budget.
	stop chan struct{}

	closeOnce sync.Once
}

// slot is the response of one request; done is closed once frame (or
// pieces) is set or the request failed (fail: the connection closes
// instead, after the responses before it). Until done the request's
// goroutine owns the slot; after, whoever holds it (the writer, or a
// reader that could not queue it) and frees it once.
type slot struct {
	done  chan struct{}
	frame []byte
	// pieces, when set instead of frame, is the frame in pieces, some of
	// them memory the handler lent (see Reply.Release).
	pieces net.Buffers
	size   int // of the frame
	// buf is the pooled buffer frame or pieces are in, given back by free.
	buf *[]byte
	// release is the Reply's Release while the frame points at what it
	// lends.
	release func()
	fail    bool
}

// free gives the slot's buffer back and calls its Release: the frame is
// written or will never be.
func (sl *slot) free(logger *slog.Logger) {
	if sl.buf != nil {
		putFrameBuf(sl.buf)
		sl.buf = nil
	}
	sl.frame, sl.pieces = nil, nil
	callRelease(logger, sl.release)
	sl.release = nil
}

// discard frees a slot that will not be written, once its response is done
// (a Reply.Wait ends soon: its connection's context is canceled).
func (c *conn) discard(sl *slot) {
	<-sl.done
	sl.free(c.logger)
}

// callRelease calls a Reply.Release (if any), turning a panic into a log
// line: it runs on a connection's goroutine.
func callRelease(logger *slog.Logger, release func()) {
	if release == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			logger.Error("Kafka handler's Reply.Release panicked", slog.Any("panic", r))
		}
	}()
	release()
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	remote := nc.RemoteAddr()
	if s.tls != nil {
		nc = wire.BufferedTLSServer(nc, s.tls)
	}
	c := &conn{
		s: s, nc: nc,
		info:    &Conn{Remote: remote, Local: nc.LocalAddr(), Principal: "User:ANONYMOUS"},
		logger:  s.logger.With(slog.String("remote", remote.String())),
		br:      wire.NewReadyReader(nc, readBufferSize, readPool),
		ctx:     ctx,
		idCtx:   ctx,
		cancel:  cancel,
		pending: make(chan *slot, s.cfg.MaxPendingResponses),
		stop:    make(chan struct{}),
	}
	c.info.c = c
	return c
}

// close ends the connection at once: responses not yet written are
// dropped and every request context of the connection is canceled.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		_ = c.nc.Close() // the peer may be gone already; nothing to report
		c.s.removeConn(c)
		c.s.metrics.conns.Add(context.Background(), -1)
		c.logger.Debug("Kafka connection closed")
	})
}

// stopReading makes the reader stop before its next request; the writer
// then writes what is pending and closes the connection.
func (c *conn) stopReading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopping {
		c.stopping = true
		close(c.stop)
	}
	_ = c.nc.SetReadDeadline(time.Now()) // wakes a blocked read; fails only on a closed conn
}

// armRead sets the read deadline unless the server is stopping; under mu
// so that a stop's deadline is never overwritten.
func (c *conn) armRead(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return false
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(d)) // fails only on a closed conn, which the read reports
	return true
}

func (c *conn) isStopping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// readLoop reads and handles requests until the connection fails, closes,
// idles out or the server stops.
func (c *conn) readLoop() {
	defer c.s.wg.Done()
	// The writer drains the slots queued so far, then closes the
	// connection.
	defer close(c.pending)
	c.logger.Debug("Kafka connection opened")
	if !c.authenticate() {
		c.close()
		return
	}
	var sizeBuf [4]byte
	for {
		if !c.armRead(c.s.cfg.IdleTimeout) {
			return
		}
		n, err := io.ReadFull(c.br, sizeBuf[:])
		if err != nil {
			switch {
			case c.isStopping() && n == 0:
				return
			case isTimeout(err) && n == 0 && c.outstanding.Load() > 0:
				continue // waiting on our own responses is not idle
			case isTimeout(err) && n == 0:
				c.logger.Debug("closing idle Kafka connection", slog.Duration("idle", c.s.cfg.IdleTimeout))
			case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
			default:
				c.logger.Debug("reading a Kafka request failed", log.Err(err))
			}
			c.close()
			return
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		// Checked before anything is allocated for the frame: a hostile
		// size costs nothing.
		minSize := int32(minHeaderBytes)
		if c.sasl.raw {
			minSize = 1 // a bare SASL token after a v0 handshake
		}
		if size < minSize || int64(size) > int64(c.s.cfg.MaxRequestBytes) {
			c.logger.Warn("Kafka request frame size out of bounds, closing the connection",
				slog.Int("size", int(size)), slog.Int("max", c.s.cfg.MaxRequestBytes))
			c.s.metrics.request(-1, outcomeInvalid, -1)
			c.close()
			return
		}
		if err := c.s.queued.acquire(c.ctx, c.stop, int64(size)); err != nil {
			return // closed or stopping
		}
		// A client that sends a size and then stalls holds the frame's
		// buffer: it gets the request timeout to send the rest.
		if !c.armRead(c.s.cfg.RequestTimeout) {
			c.s.queued.release(int64(size))
			return
		}
		frame, err := c.readFrame(int(size))
		if err != nil {
			c.s.queued.release(int64(size))
			if !c.isStopping() {
				c.logger.Debug("reading a Kafka request failed", log.Err(err), slog.Int("size", int(size)))
			}
			c.close()
			return
		}
		c.s.metrics.bytesIn.Add(context.Background(), int64(size)+4)
		if !c.waitMuted() {
			frame.free()
			c.s.queued.release(int64(size))
			return
		}
		if !c.handle(frame) {
			c.close()
			return
		}
	}
}

// handle decodes one frame, calls its handler and queues its slot. It
// reports false when the connection must close. It gives the frame's
// bytes back to the request budget, and a pooled frame to its pool, once
// the answer is ready: encoded, or known to be none (see requestFrame).
func (c *conn) handle(fr requestFrame) bool {
	frame := fr.b
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			fr.free()
			c.s.queued.release(int64(len(frame)))
		})
	}
	// Every path below ends in release: the early returns through this
	// defer, a Reply.Wait through finish.
	waiting := false
	defer func() {
		if !waiting {
			release()
		}
	}()
	if c.sasl.raw {
		return c.rawToken(frame)
	}
	start := time.Now()
	h, rest, err := parseHeader(frame)
	if err != nil {
		c.logger.Warn("bad Kafka request header, closing the connection", log.Err(err))
		c.s.metrics.request(-1, outcomeInvalid, -1)
		return false
	}
	if ok, why := c.saslPermits(h.key); !ok {
		c.logger.Info("Kafka request refused, closing the connection", slog.String("reason", why),
			slog.String("api", apiName(h.key)), slog.String("client_id", h.clientID))
		c.s.metrics.request(h.key, outcomeUnauthenticated, -1)
		return false
	}
	handler, minV, maxV, ok := c.s.mux.Lookup(h.key)
	if !ok || h.version < minV || h.version > maxV {
		if h.key == apiVersionsKey {
			// KIP-511: a client newer than the server learns the
			// newest ApiVersions served and retries with it.
			c.s.metrics.request(h.key, outcomeUnsupported, time.Since(start).Seconds())
			buf := getFrameBuf()
			*buf = appendResponse((*buf)[:0], h.correlationID, false, c.s.unsupportedApiVersions())
			sl := &slot{done: closedChan, frame: *buf, size: len(*buf), buf: buf}
			if !c.enqueue(sl) {
				sl.free(c.logger)
				return false
			}
			return true
		}
		c.logger.Warn("unsupported Kafka API key or version, closing the connection",
			slog.Int("api_key", int(h.key)), slog.String("api", apiName(h.key)), slog.Int("api_version", int(h.version)),
			slog.String("client_id", h.clientID))
		c.s.metrics.request(h.key, outcomeUnsupported, -1)
		return false
	}
	msg, err := decodeBody(h.key, h.version, rest)
	if err != nil {
		c.logger.Warn("undecodable Kafka request, closing the connection", log.Err(err), slog.String("client_id", h.clientID))
		c.s.metrics.request(h.key, outcomeInvalid, -1)
		return false
	}
	req := &Request{Key: h.key, Version: h.version, CorrelationID: h.correlationID, ClientID: h.clientID, Msg: msg, Conn: c.info}

	ctx, span := c.s.tracer.Start(c.idCtx, "kafka."+apiName(h.key), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.Int("kafka.api_key", int(h.key)),
			attribute.Int("kafka.api_version", int(h.version)),
			attribute.String("kafka.client_id", h.clientID),
			attribute.Int("kafka.correlation_id", int(h.correlationID)),
			attribute.String("network.peer.address", c.info.Remote.String()),
		))
	ctx, cancel := context.WithTimeout(ctx, c.s.cfg.RequestTimeout)
	fail := func(outcome string, err error) {
		span.SetStatus(codes.Error, err.Error())
		span.End()
		cancel()
		c.s.metrics.request(h.key, outcome, time.Since(start).Seconds())
	}

	// Quotas: the produce bytes count when read, the handler's time once
	// it returns; the principal is read here, where SASL may change it.
	q, principal := c.s.quotas, c.info.Principal
	var throttle time.Duration
	if q != nil && h.key == produceKey {
		throttle = q.RecordProduce(principal, h.clientID, len(frame))
		// Muted now, not when the response is ready: the requests the
		// client pipelined behind this one wait from here.
		c.mute(throttle)
	}
	handlerStart := time.Now()
	reply, err := callHandler(ctx, handler, req)
	if q != nil && !quotaExempt(h.key) {
		throttle = max(throttle, q.RecordRequestTime(principal, h.clientID, time.Since(handlerStart)))
	}
	if err != nil {
		callRelease(c.logger, reply.Release)
		c.logger.Warn("Kafka handler refused the request, closing the connection", log.Err(err),
			slog.String("api", apiName(h.key)), slog.Int("api_version", int(h.version)), slog.String("client_id", h.clientID))
		fail(outcomeError, err)
		return false
	}
	if reply.Msg == nil && reply.Wait == nil {
		if throttle > 0 {
			c.mute(throttle) // acks=0: no response to say it in
		}
		callRelease(c.logger, reply.Release)
		span.End()
		cancel()
		c.s.metrics.request(h.key, outcomeNoResponse, time.Since(start).Seconds())
		return true
	}
	sl := &slot{done: make(chan struct{})}
	finish := func(resp kmsg.Response) {
		defer close(sl.done)
		defer release()
		if q != nil && resp != nil {
			t := throttle
			if fr, ok := resp.(*kmsg.FetchResponse); ok && h.key == fetchKey {
				t = max(t, q.RecordFetch(principal, h.clientID, fetchBytes(fr)))
			}
			c.applyThrottle(resp, t)
		}
		err := c.encode(h, resp, sl)
		if sl.pieces != nil {
			sl.release = reply.Release // the frame points at what it lends
		} else {
			callRelease(c.logger, reply.Release) // copied, or nothing to write
		}
		if err != nil {
			c.logger.Error("Kafka handler answered wrongly, closing the connection", log.Err(err),
				slog.String("api", apiName(h.key)), slog.Int("api_version", int(h.version)))
			sl.fail = true
			fail(outcomeError, err)
			return
		}
		outcome := outcomeOK
		if c.ctx.Err() != nil {
			outcome = outcomeCanceled // the connection closed meanwhile: nothing will be written
			span.SetStatus(codes.Error, "connection closed")
		}
		span.End()
		cancel()
		c.s.metrics.request(h.key, outcome, time.Since(start).Seconds())
	}
	if reply.Msg != nil {
		finish(reply.Msg)
	} else {
		waiting = true
		c.s.wg.Add(1)
		go func() {
			defer c.s.wg.Done()
			finish(callWait(ctx, reply.Wait))
		}()
	}
	if !c.enqueue(sl) {
		c.discard(sl)
		return false
	}
	return true
}

// closedChan is the done channel of slots ready when queued.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// enqueue queues sl behind the connection's earlier responses, waiting
// while MaxPendingResponses are queued.
func (c *conn) enqueue(sl *slot) bool {
	c.outstanding.Add(1)
	select {
	case c.pending <- sl:
		return true
	case <-c.ctx.Done():
		c.outstanding.Add(-1)
		return false
	}
}

// encode sets resp's version to the request's and frames it into sl: a
// Fetch response with large record batches in pieces that point at them
// (see fetchPieces), any other whole in a pooled buffer.
func (c *conn) encode(h header, resp kmsg.Response, sl *slot) error {
	if resp == nil {
		return errors.New("Reply.Wait returned no response")
	}
	if resp.Key() != h.key {
		return fmt.Errorf("%s response to a %s request", apiName(resp.Key()), apiName(h.key))
	}
	resp.SetVersion(h.version)
	flexibleHeader := responseHeaderFlexible(h.key, resp.IsFlexible())
	if fr, ok := resp.(*kmsg.FetchResponse); ok {
		if buf, pieces, ok := fetchPieces(h.correlationID, flexibleHeader, fr); ok {
			sl.buf, sl.pieces = buf, pieces
			for _, p := range pieces {
				sl.size += len(p)
			}
			return nil
		}
	}
	buf := getFrameBuf()
	*buf = appendResponse((*buf)[:0], h.correlationID, flexibleHeader, resp)
	sl.buf, sl.frame, sl.size = buf, *buf, len(*buf)
	return nil
}

// callHandler calls h, turning a panic into an error so a handler bug
// closes one connection rather than the process.
func callHandler(ctx context.Context, h Handler, req *Request) (reply Reply, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler of %s v%d panicked: %v", apiName(req.Key), req.Version, r)
		}
	}()
	return h(ctx, req)
}

// callWait calls a Reply.Wait; a panic gives a nil response, which closes
// the connection.
func callWait(ctx context.Context, wait func(context.Context) kmsg.Response) (resp kmsg.Response) {
	defer func() {
		if r := recover(); r != nil {
			resp = nil
		}
	}()
	return wait(ctx)
}

// writeLoop writes the responses in request order until the reader has
// stopped and every queued response is written, or the connection fails;
// then it closes the connection and frees the responses left unwritten.
func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	sl := c.writeAll()
	c.close() // first: it cancels the Reply.Wait a discard waits for
	if sl != nil {
		c.discard(sl)
	}
	// The reader ends now (its context is canceled) and closes pending.
	for sl := range c.pending {
		c.discard(sl)
	}
}

// writeAll writes the queued responses until pending is closed and empty
// or the connection fails; it returns the slot it took and did not write,
// if any.
func (c *conn) writeAll() *slot {
	// bw is taken when there is a response to write and given back once
	// the responses queued so far are flushed.
	var bw *bufio.Writer
	defer func() {
		if bw != nil {
			putWriter(bw)
		}
	}()
	for sl := range c.pending {
		if bw == nil {
			bw = getWriter(c.nc)
		}
		select {
		case <-sl.done:
		default:
			// Send what is buffered before waiting on a slow response.
			if !c.flush(bw) {
				return sl
			}
			select {
			case <-sl.done:
			case <-c.ctx.Done():
				return sl
			}
		}
		if sl.fail {
			_ = c.flush(bw) // the responses before the failed one
			return sl
		}
		err := c.write(bw, sl)
		sl.free(c.logger)
		if err != nil {
			c.logger.Debug("writing a Kafka response failed", log.Err(err))
			return nil
		}
		c.s.metrics.bytesOut.Add(context.Background(), int64(sl.size))
		c.outstanding.Add(-1)
		if len(c.pending) == 0 {
			if !c.flush(bw) {
				return nil
			}
			putWriter(bw)
			bw = nil
		}
	}
	if bw != nil {
		_ = c.flush(bw)
	}
	return nil
}

// write writes one response: a whole frame through bw, a frame in pieces
// straight to the socket (one writev) after what bw holds.
func (c *conn) write(bw *bufio.Writer, sl *slot) error {
	if sl.pieces == nil {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.IdleTimeout)) // fails only on a closed conn, which Write reports
		_, err := bw.Write(sl.frame)
		return err
	}
	// Lent memory (page-cache chunks) may hold up a log truncation until
	// released: a client that stops reading gets the request timeout to
	// take the response, not the idle timeout, before the connection
	// closes and the memory is given back.
	_ = c.nc.SetWriteDeadline(time.Now().Add(min(c.s.cfg.IdleTimeout, c.s.cfg.RequestTimeout))) // as above
	if err := bw.Flush(); err != nil {
		return err
	}
	if tc, ok := c.nc.(buffersWriter); ok {
		// No writev under TLS (wire.TLSConn): the pieces' records leave
		// in one write. A connection limited per IP (quota) passes them
		// to its socket's writev.
		_, err := tc.WriteBuffers(&sl.pieces)
		return err
	}
	_, err := sl.pieces.WriteTo(c.nc)
	return err
}

// buffersWriter is a connection with a gathering write of its own.
type buffersWriter interface {
	WriteBuffers(v *net.Buffers) (int64, error)
}

func (c *conn) flush(bw *bufio.Writer) bool {
	if bw.Buffered() == 0 {
		return true
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.IdleTimeout)) // fails only on a closed conn, which Flush reports
	if err := bw.Flush(); err != nil {
		c.logger.Debug("writing a Kafka response failed", log.Err(err))
		return false
	}
	return true
}
