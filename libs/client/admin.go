package client

import (
	"context"

	"google.golang.org/grpc"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// DescribeCluster returns the cluster id, the controllers (and which one is
// active) and the registered nodes.
func (c *Client) DescribeCluster(ctx context.Context) (*controllerv1.DescribeClusterResponse, error) {
	var out *controllerv1.DescribeClusterResponse
	err := c.anyNode(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		out, err = controllerv1.NewControllerServiceClient(conn).DescribeCluster(ctx, &controllerv1.DescribeClusterRequest{})
		return err
	})
	return out, err
}
