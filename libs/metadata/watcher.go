package metadata

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/grpc"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/log"
)

// Dialer returns a connection to a node; a client.Client or a small pool
// provides it.
type Dialer func(addr string) (*grpc.ClientConn, error)

// Watcher keeps a Cache in step with the controllers' WatchMetadata stream,
// moving to another controller when one fails. Any controller serves the
// stream, active or not.
type Watcher struct {
	cache       *Cache
	controllers []string
	dial        Dialer
	nodeID      int32
	logger      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
}

// NewWatcher returns a watcher over the given controller addresses.
func NewWatcher(cache *Cache, controllers []string, dial Dialer, nodeID int32, logger *slog.Logger) *Watcher {
	return &Watcher{cache: cache, controllers: controllers, dial: dial, nodeID: nodeID, logger: logger.With(log.Component("metadata-watcher"))}
}

// Name implements service.Service.
func (w *Watcher) Name() string { return "metadata-watcher" }

// Start begins watching and returns once the first snapshot has arrived.
func (w *Watcher) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(runCtx)
	}()
	if _, err := w.cache.WaitFor(ctx, func(*Image) bool { return w.cache.Loaded() }); err != nil {
		return fmt.Errorf("waiting for cluster metadata from controllers %v: %w", w.controllers, err)
	}
	return nil
}

// Stop ends the watch.
func (w *Watcher) Stop(ctx context.Context) error {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Watcher) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for i := 0; ctx.Err() == nil; i++ {
		addr := w.controllers[i%len(w.controllers)]
		err := w.watchOnce(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.logger.Debug("metadata watch ended; trying the next controller", log.Addr(addr), log.Err(err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (w *Watcher) watchOnce(ctx context.Context, addr string) error {
	conn, err := w.dial(addr)
	if err != nil {
		return err
	}
	from := int64(0)
	if w.cache.Loaded() {
		from = w.cache.Load().Revision
	}
	stream, err := controllerv1.NewControllerServiceClient(conn).WatchMetadata(ctx, &controllerv1.WatchMetadataRequest{
		BrokerId: w.nodeID, FromRevision: from,
	})
	if err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch u := msg.GetUpdate().(type) {
		case *controllerv1.WatchMetadataResponse_Snapshot:
			w.cache.Reset(FromSnapshot(u.Snapshot))
			w.logger.Debug("metadata snapshot received", log.Addr(addr), log.Revision(u.Snapshot.GetRevision()))
		case *controllerv1.WatchMetadataResponse_Delta:
			w.cache.Apply(u.Delta)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
