package client

import (
	"context"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// AlterClientQuotas sets and removes client quotas (Kafka's model and
// keys: producer_byte_rate, consumer_byte_rate and request_percentage per
// user and client id, connection_creation_rate per ip). Each entry is
// answered in its result slot, in request order; an entity left without
// values is deleted. Every process enforces the change once its metadata
// has it, normally within milliseconds.
func (c *Client) AlterClientQuotas(ctx context.Context, req *controllerv1.AlterClientQuotasRequest) (*controllerv1.AlterClientQuotasResponse, error) {
	var out *controllerv1.AlterClientQuotasResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.AlterClientQuotas(ctx, req)
		return err
	})
	return out, err
}

// DescribeClientQuotas lists the quotas of the entities that match the
// request's filter; a request without components lists every quota.
func (c *Client) DescribeClientQuotas(ctx context.Context, req *controllerv1.DescribeClientQuotasRequest) (*controllerv1.DescribeClientQuotasResponse, error) {
	if req == nil {
		req = &controllerv1.DescribeClientQuotasRequest{}
	}
	var out *controllerv1.DescribeClientQuotasResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeClientQuotas(ctx, req)
		return err
	})
	return out, err
}
