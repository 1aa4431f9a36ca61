package wire

import (
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
)

// Pool keeps one client connection per address. Connections are lazy and
// reconnect by themselves, so a pooled connection stays usable across a
// peer's restarts. It is safe for concurrent use.
type Pool struct {
	opts ClientOptions

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewPool returns an empty pool whose connections use opts.
func NewPool(opts ClientOptions) *Pool {
	return &Pool{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// Get returns the connection to addr, creating it on first use.
func (p *Pool) Get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return nil, errors.New("connection pool is closed")
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := Dial(addr, p.opts)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// Close closes every connection; Get fails afterwards.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errList []error
	for addr, c := range p.conns {
		if err := c.Close(); err != nil {
			errList = append(errList, fmt.Errorf("closing connection to %s: %w", addr, err))
		}
	}
	p.conns = nil
	return errors.Join(errList...)
}
