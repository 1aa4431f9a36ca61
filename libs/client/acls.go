package client

import (
	"context"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// CreateAcls adds ACL bindings on the active controller. Each binding is
// answered in its slot of the response's errors (nil: created, or it
// existed already). Every process enforces the new ACLs once its metadata
// has them, normally within milliseconds.
func (c *Client) CreateAcls(ctx context.Context, bindings ...*controllerv1.AclBinding) (*controllerv1.CreateAclsResponse, error) {
	var out *controllerv1.CreateAclsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.CreateAcls(ctx, &controllerv1.CreateAclsRequest{Bindings: bindings})
		return err
	})
	return out, err
}

// DescribeAcls lists the ACL bindings that match filter (unset fields
// match anything; nil lists every ACL).
func (c *Client) DescribeAcls(ctx context.Context, filter *controllerv1.AclBinding) (*controllerv1.DescribeAclsResponse, error) {
	var out *controllerv1.DescribeAclsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeAcls(ctx, &controllerv1.DescribeAclsRequest{Filter: filter})
		return err
	})
	return out, err
}

// DeleteAcls deletes every ACL binding that matches one of filters and
// returns them. A filter with no field set matches every ACL.
func (c *Client) DeleteAcls(ctx context.Context, filters ...*controllerv1.AclBinding) (*controllerv1.DeleteAclsResponse, error) {
	var out *controllerv1.DeleteAclsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DeleteAcls(ctx, &controllerv1.DeleteAclsRequest{Filters: filters})
		return err
	})
	return out, err
}
