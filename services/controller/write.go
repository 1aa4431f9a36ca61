package controller

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metadata"
)

// maxTxnOps stays under etcd's default limit of 128 operations per
// transaction (--max-txn-ops).
const maxTxnOps = 100

// errConflict means the records a write was computed from changed in etcd
// before it committed; the caller recomputes from the newer state.
var errConflict = errors.New("metadata changed concurrently")

// txn builds one compare-and-swap write: ops apply only if every compare
// holds (the records are still the versions the decision was made on).
type txn struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
	// large allows up to maxTopicTxnOps operations (topic creation and
	// deletion), which the embedded etcd is configured to accept.
	large bool
}

func (x *txn) empty() bool { return len(x.ops) == 0 }

// put writes a record that was read at modRev (0: must not exist yet).
func (c *Controller) put(x *txn, key string, modRev int64, msg proto.Message) {
	b, err := proto.Marshal(msg)
	if err != nil {
		panic(err) // plain generated messages always marshal
	}
	full := c.store.Key(key)
	x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(full), "=", modRev))
	x.ops = append(x.ops, clientv3.OpPut(full, string(b)))
}

// putRaw writes a string value with the same compare rule as put.
func (c *Controller) putRaw(x *txn, key string, modRev int64, val string) {
	full := c.store.Key(key)
	x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(full), "=", modRev))
	x.ops = append(x.ops, clientv3.OpPut(full, val))
}

// del deletes a key read at modRev.
func (c *Controller) del(x *txn, key string, modRev int64) {
	full := c.store.Key(key)
	x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(full), "=", modRev))
	x.ops = append(x.ops, clientv3.OpDelete(full))
}

// commit runs x guarded by the term's election key. It returns the revision
// of the write; errConflict if a compared record changed; NOT_CONTROLLER if
// this controller is no longer the active one (its writes can never land
// after a newer controller took over).
func (c *Controller) commit(ctx context.Context, t *term, x *txn) (int64, error) {
	resp, err := c.store.Client.Txn(ctx).
		If(t.leaderCmp()).
		Then(clientv3.OpTxn(x.cmps, x.ops, nil)).
		Commit()
	if err != nil {
		return 0, errs.New(errs.RequestTimedOut, "writing metadata to etcd: %v", err)
	}
	if !resp.Succeeded {
		return 0, errs.New(errs.NotController, "controller %d lost its leadership while writing", c.nodeID)
	}
	if !resp.Responses[0].GetResponseTxn().GetSucceeded() {
		return 0, errConflict
	}
	return resp.Header.GetRevision(), nil
}

// decide computes a write from the current state (under the read lock) and
// commits it, recomputing on conflicts. decide returns the transaction (empty
// when there is nothing to write) and an error that ends the attempt. After
// a successful write, update waits until this controller's view includes it,
// so the caller (and the client, through any node's metadata) reads its own
// write.
//
// The first decision is made only after the view has caught up with etcd's
// current revision: a decision that writes nothing (the topic already
// exists, does not exist) must not come from a stale view, or it would
// contradict a write another request already saw acknowledged.
func (c *Controller) update(ctx context.Context, t *term, decide func(st *state) (*txn, error)) (int64, error) {
	if err := c.catchUp(ctx); err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		c.mu.RLock()
		x, err := decide(c.st)
		c.mu.RUnlock()
		if err != nil {
			return 0, err
		}
		if x == nil || x.empty() {
			return c.cache.Load().Revision, nil
		}
		if limit := map[bool]int{false: maxTxnOps, true: maxTopicTxnOps}[x.large]; len(x.ops) > limit {
			return 0, fmt.Errorf("one metadata write of %d operations exceeds the limit of %d", len(x.ops), limit)
		}
		rev, err := c.commit(ctx, t, x)
		if errors.Is(err, errConflict) && attempt < 20 {
			// Wait for the newer state before deciding again.
			if err := c.catchUp(ctx); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		return rev, c.waitRev(ctx, rev)
	}
}

// waitRev waits until this controller's view includes revision rev.
func (c *Controller) waitRev(ctx context.Context, rev int64) error {
	_, err := c.cache.WaitFor(ctx, func(img *metadata.Image) bool { return img.Revision >= rev })
	return err
}

// catchUp waits until the view includes every write committed so far, by
// reading etcd's current revision.
func (c *Controller) catchUp(ctx context.Context) error {
	resp, err := c.store.Client.Get(ctx, c.store.Key("cluster/id"))
	if err != nil {
		return errs.New(errs.RequestTimedOut, "reading etcd revision: %v", err)
	}
	return c.waitRev(ctx, resp.Header.GetRevision())
}
