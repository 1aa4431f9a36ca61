package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	storagev1 "github.com/sluice-io/sluice/gen/go/sluice/storage/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// Metadata returns cluster metadata (nodes, active controller, the topics'
// partitions) from any node. With no topics it returns every topic.
func (c *Client) Metadata(ctx context.Context, topics ...string) (*metadatav1.GetMetadataResponse, error) {
	var out *metadatav1.GetMetadataResponse
	err := c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		out, err = metadatav1.NewMetadataServiceClient(conn).GetMetadata(ctx, &metadatav1.GetMetadataRequest{Topics: topics})
		return err
	})
	return out, err
}

// onController runs fn against the active controller. Each pass tries the
// controller metadata names, then the other registered controllers and the
// bootstrap addresses, passing over one that cannot be reached (it may be
// the dead active controller metadata still names) and following
// NOT_CONTROLLER hints. A retriable answer (an election in progress, a
// quorum without majority) ends the pass; passes repeat with backoff until
// ctx ends, and then the last answer a server gave is returned, so the
// caller sees why no controller accepted the call rather than a refused
// connection.
func (c *Client) onController(ctx context.Context, fn func(ctx context.Context, cc controllerv1.ControllerServiceClient) error) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var b backoff
	var answered error // the last retriable error a server answered with
	for attempt := 0; ; attempt++ {
		addrs, merr := c.controllerAddrs(ctx)
		if merr != nil && !errs.IsRetriable(merr) {
			return merr
		}
		err := c.controllerPass(ctx, addrs, fn)
		switch {
		case err == nil:
			return nil
		case serverAnswer(err):
			answered = err
		case merr != nil && attempt == 0 && errs.Is(merr, errs.NodeUnreachable):
			// No node could be reached at all: say so now rather than
			// after the timeout.
			return merr
		}
		if !errs.IsRetriable(err) {
			return err
		}
		if !b.wait(ctx) {
			if answered != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return errs.From(answered)
			}
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
	}
}

// controllerAddrs lists the addresses to try for a controller call: the
// active controller metadata names, the other nodes with the controller
// role, then the bootstrap addresses. If metadata cannot be had, the
// bootstrap addresses alone, with metadata's error.
func (c *Client) controllerAddrs(ctx context.Context) ([]string, error) {
	md, err := c.Metadata(ctx)
	var out []string
	if err == nil {
		if a := md.GetControllerAddress(); a != "" {
			out = append(out, a)
		}
		for _, b := range md.GetBrokers() {
			if slices.Contains(b.GetRoles(), "controller") { // role.Controller
				for _, e := range b.GetEndpoints() {
					out = append(out, joinHostPort(e.GetHost(), e.GetPort()))
					break
				}
			}
		}
	}
	return append(out, c.bootstrapOrder()...), err
}

// controllerPass makes one pass over addrs (a NOT_CONTROLLER hint is tried
// next) and returns nil on success or the error that ended it. Any answer
// but "try another node" ends the pass: an unreachable node, one not ready,
// one without the controller service, or a standby only move on to the next
// address. Past the last address, the last answer a server gave is
// returned, or else the last transport failure.
func (c *Client) controllerPass(ctx context.Context, addrs []string, fn func(ctx context.Context, cc controllerv1.ControllerServiceClient) error) error {
	tried := map[string]bool{}
	var last, lastServer error
	for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
		addr := addrs[i]
		if tried[addr] {
			continue
		}
		tried[addr] = true
		err := c.callController(ctx, addr, fn)
		if err == nil {
			return nil
		}
		e := errs.From(err)
		switch {
		case e.Code == errs.Unimplemented:
			// A node without the controller role: not worth reporting
			// while any other answer is at hand.
			if last == nil {
				last = err
			}
			continue
		case serverAnswer(err):
			lastServer = err
		}
		last = err
		switch e.Code {
		case errs.NotController:
			if h := e.Controller.GetAddress(); h != "" && !tried[h] {
				addrs = slices.Insert(addrs, i+1, h)
			}
			continue
		case errs.NodeUnreachable, errs.NodeNotReady, errs.RequestTimedOut:
			continue
		}
		return err
	}
	if lastServer != nil {
		return lastServer
	}
	if last == nil || errs.Is(last, errs.Unimplemented) {
		return errs.New(errs.NotController, "no controller answered at %v (%v)", addrs, last)
	}
	return last
}

// callController runs fn on the controller at addr. A connection that is
// not up yet gets BootstrapTimeout to come up, so a paused or cut-off node
// is passed over instead of holding the call until its deadline; a call on
// an established connection gets the caller's whole deadline, as admin
// calls may take a while.
func (c *Client) callController(ctx context.Context, addr string, fn func(ctx context.Context, cc controllerv1.ControllerServiceClient) error) error {
	conn, err := c.Conn(addr)
	if err != nil {
		return err
	}
	conn.Connect()
	wctx, cancel := context.WithTimeout(ctx, c.cfg.BootstrapTimeout)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Idle || s == connectivity.Connecting; s = conn.GetState() {
		if !conn.WaitForStateChange(wctx, s) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errs.New(errs.NodeUnreachable, "controller %s did not answer within %v", addr, c.cfg.BootstrapTimeout)
		}
	}
	return fn(ctx, controllerv1.NewControllerServiceClient(conn))
}

// serverAnswer says whether err is a Sluice server's answer (a status with
// an ErrorInfo) rather than a transport failure or a local error.
func serverAnswer(err error) bool {
	if errors.As(err, new(*errs.Error)) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*edpb.ErrorInfo); ok {
			return true
		}
	}
	return false
}

// DescribeCluster returns the cluster id, the controllers (and which one is
// active) and the registered nodes. Any controller answers.
func (c *Client) DescribeCluster(ctx context.Context) (*controllerv1.DescribeClusterResponse, error) {
	var out *controllerv1.DescribeClusterResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeCluster(ctx, &controllerv1.DescribeClusterRequest{})
		return err
	})
	return out, err
}

// CreateTopics creates topics; each result carries its own error.
func (c *Client) CreateTopics(ctx context.Context, req *controllerv1.CreateTopicsRequest) (*controllerv1.CreateTopicsResponse, error) {
	var out *controllerv1.CreateTopicsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.CreateTopics(ctx, req)
		return err
	})
	if err == nil && !req.GetValidateOnly() {
		now := time.Now()
		for _, res := range out.GetResults() {
			if res.GetError() == nil {
				c.created.note(res.GetName(), now)
			}
		}
	}
	return out, err
}

// CreateTopic creates one topic and returns its error, if any. partitions
// or rf of 0 use the cluster defaults.
func (c *Client) CreateTopic(ctx context.Context, name string, partitions, rf int32, configs map[string]string) (*controllerv1.CreateTopicResult, error) {
	spec := &controllerv1.TopicSpec{Name: name, Configs: configs}
	if partitions != 0 {
		spec.NumPartitions = &partitions
	}
	if rf != 0 {
		spec.ReplicationFactor = &rf
	}
	resp, err := c.CreateTopics(ctx, &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{spec}})
	if err != nil {
		return nil, err
	}
	res := resp.GetResults()[0]
	if e := errs.FromProto(res.GetError()); e != nil {
		return res, e
	}
	return res, nil
}

// DeleteTopics deletes topics; each result carries its own error.
func (c *Client) DeleteTopics(ctx context.Context, names ...string) (*controllerv1.DeleteTopicsResponse, error) {
	var out *controllerv1.DeleteTopicsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DeleteTopics(ctx, &controllerv1.DeleteTopicsRequest{Names: names})
		return err
	})
	if err == nil {
		// A topic deleted right after this client created it is gone, not
		// still unknown to a lagging node: without this, its producers and
		// consumers kept retrying its absence for the rest of createdGrace.
		for _, res := range out.GetResults() {
			if res.GetError() == nil {
				c.created.forget(res.GetName())
			}
		}
	}
	return out, err
}

// ListTopics lists topics.
func (c *Client) ListTopics(ctx context.Context, includeInternal bool) (*controllerv1.ListTopicsResponse, error) {
	var out *controllerv1.ListTopicsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.ListTopics(ctx, &controllerv1.ListTopicsRequest{IncludeInternal: includeInternal})
		return err
	})
	return out, err
}

// DescribeTopics describes topics (all non-internal ones when none given).
func (c *Client) DescribeTopics(ctx context.Context, names ...string) (*controllerv1.DescribeTopicsResponse, error) {
	var out *controllerv1.DescribeTopicsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeTopics(ctx, &controllerv1.DescribeTopicsRequest{Names: names})
		return err
	})
	return out, err
}

// CreatePartitions grows topics.
func (c *Client) CreatePartitions(ctx context.Context, req *controllerv1.CreatePartitionsRequest) (*controllerv1.CreatePartitionsResponse, error) {
	var out *controllerv1.CreatePartitionsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.CreatePartitions(ctx, req)
		return err
	})
	return out, err
}

// DescribeConfigs describes topic or broker configs.
func (c *Client) DescribeConfigs(ctx context.Context, req *controllerv1.DescribeConfigsRequest) (*controllerv1.DescribeConfigsResponse, error) {
	var out *controllerv1.DescribeConfigsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeConfigs(ctx, req)
		return err
	})
	return out, err
}

// AlterConfigs changes configs incrementally.
func (c *Client) AlterConfigs(ctx context.Context, req *controllerv1.AlterConfigsRequest) (*controllerv1.AlterConfigsResponse, error) {
	var out *controllerv1.AlterConfigsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.AlterConfigs(ctx, req)
		return err
	})
	return out, err
}

// ElectLeaders runs preferred or unclean leader elections.
func (c *Client) ElectLeaders(ctx context.Context, req *controllerv1.ElectLeadersRequest) (*controllerv1.ElectLeadersResponse, error) {
	var out *controllerv1.ElectLeadersResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.ElectLeaders(ctx, req)
		return err
	})
	return out, err
}

// AlterPartitionReassignments starts or cancels reassignments.
func (c *Client) AlterPartitionReassignments(ctx context.Context, req *controllerv1.AlterPartitionReassignmentsRequest) (*controllerv1.AlterPartitionReassignmentsResponse, error) {
	var out *controllerv1.AlterPartitionReassignmentsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.AlterPartitionReassignments(ctx, req)
		return err
	})
	return out, err
}

// ListPartitionReassignments lists reassignments in progress.
func (c *Client) ListPartitionReassignments(ctx context.Context, topics ...string) (*controllerv1.ListPartitionReassignmentsResponse, error) {
	var out *controllerv1.ListPartitionReassignmentsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.ListPartitionReassignments(ctx, &controllerv1.ListPartitionReassignmentsRequest{Topics: topics})
		return err
	})
	return out, err
}

// OffsetSpec chooses which offset ListOffset returns.
type OffsetSpec = storagev1.OffsetSpec

// Offset specs.
const (
	OffsetEarliest = storagev1.OffsetSpec_OFFSET_SPEC_EARLIEST
	OffsetLatest   = storagev1.OffsetSpec_OFFSET_SPEC_LATEST
)

// ListOffset returns a partition's earliest or latest (high watermark)
// offset from its leader, retrying retriable failures (a leader moving or
// restarting) as ListOffsets does.
func (c *Client) ListOffset(ctx context.Context, topic string, partition int32, spec OffsetSpec) (int64, error) {
	tp := TopicPartition{Topic: topic, Partition: partition}
	m, err := c.ListOffsets(ctx, spec, 0, tp)
	if err != nil {
		return -1, err
	}
	return m[tp], nil
}
