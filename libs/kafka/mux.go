// Package kafka serves Kafka's wire protocol beside gRPC. A process has one
// listener (Server) and one Mux; each role registers handlers for the API
// keys it serves, as it registers its gRPC services, and the listener
// answers ApiVersions from what is registered. Request and response types
// are franz-go's kmsg: no wire struct is written by hand here.
package kafka

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request is one decoded Kafka request.
type Request struct {
	Key           int16
	Version       int16
	CorrelationID int32
	// ClientID is the header's client id ("" when null).
	ClientID string
	// Msg is the decoded body, its version set. Its strings are its own;
	// its byte fields (a Produce's record batches, SASL tokens, group
	// metadata) point into the frame it was read from. A Produce frame is
	// a pooled buffer, reused for a later request once the response is
	// encoded (after Reply.Wait, if set, has returned) or once there is
	// none: a Produce handler must copy what it keeps of those bytes
	// beyond that. Other frames are never reused.
	Msg kmsg.Request
	// Conn is the connection the request came on.
	Conn *Conn
}

// Conn describes a client connection.
type Conn struct {
	Remote net.Addr
	Local  net.Addr
	// Principal is the authenticated principal, "User:ANONYMOUS" until
	// the connection authenticates (TLS client certificate or SASL).
	Principal string

	c *conn // the connection's state, for the SASL handlers
}

// Reply is a handler's answer. Msg is the answer when it is ready now. Wait,
// when set instead, produces it later: the connection goes on with its next
// request meanwhile (so a produce can wait for replication while the next
// one appends) and still writes responses in request order. Neither set
// means no response at all (Produce with acks=0).
//
// Release, when set, lets the response point at memory the handler lends
// (a Fetch's record batches straight from the page cache) instead of
// copying it: the server calls it exactly once, after Wait (if set) has
// returned, when it no longer reads the response's bytes: once the
// response is written to the socket (large record batches of a Fetch
// response are written from the memory they point at, not copied), or
// encoded into a copy, or dropped (the response could not be encoded, the
// connection closed or the server stopped first). It is also called when
// the handler returns an error alongside it, or when there is no response.
// Until then the response and every byte it points at must stay unchanged.
// It runs on a connection's goroutine and must not block.
type Reply struct {
	Msg     kmsg.Response
	Wait    func(ctx context.Context) kmsg.Response
	Release func()
}

// Now is a reply that is ready.
func Now(m kmsg.Response) Reply { return Reply{Msg: m} }

// Handler answers one request. Requests of one connection reach handlers
// one at a time, in order. Per-request failures are answered inside the
// response with Kafka error codes (ErrorCode maps the catalog); a returned
// error closes the connection and is for protocol violations only.
type Handler func(ctx context.Context, req *Request) (Reply, error)

type route struct {
	min, max int16
	h        Handler
}

// Mux routes API keys to handlers. Register before the listener starts.
type Mux struct {
	mu     sync.RWMutex
	routes map[int16]route
}

// NewMux returns an empty mux.
func NewMux() *Mux { return &Mux{routes: map[int16]route{}} }

// Handle registers h for key at versions min..max. It panics when the key is
// taken or the range is outside what kmsg can encode: both are programming
// errors found at start.
func (m *Mux) Handle(key, min, max int16, h Handler) {
	req := kmsg.RequestForKey(key)
	if req == nil {
		panic(fmt.Sprintf("kafka: unknown API key %d", key))
	}
	if min < 0 || max < min || max > req.MaxVersion() {
		panic(fmt.Sprintf("kafka: API key %d: versions %d..%d outside 0..%d", key, min, max, req.MaxVersion()))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.routes[key]; ok {
		panic(fmt.Sprintf("kafka: API key %d registered twice", key))
	}
	m.routes[key] = route{min: min, max: max, h: h}
}

// Lookup returns the handler of key and its version range.
func (m *Mux) Lookup(key int16) (h Handler, min, max int16, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.routes[key]
	return r.h, r.min, r.max, ok
}

// Versions lists every registered key with its versions, sorted by key, as
// ApiVersions answers them.
func (m *Mux) Versions() []kmsg.ApiVersionsResponseApiKey {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(m.routes))
	for k, r := range m.routes {
		v := kmsg.NewApiVersionsResponseApiKey()
		v.ApiKey, v.MinVersion, v.MaxVersion = k, r.min, r.max
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ApiKey < out[j].ApiKey })
	return out
}
