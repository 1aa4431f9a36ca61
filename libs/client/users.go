package client

import (
	"context"
	"encoding/base64"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// AlterUserScramCredentials creates, replaces or deletes users' SCRAM
// credentials; each user's result carries its own error. Build upsertions
// with scramcred.NewUpsertion, so only the salted password leaves the
// client.
func (c *Client) AlterUserScramCredentials(ctx context.Context, req *controllerv1.AlterUserScramCredentialsRequest) (*controllerv1.AlterUserScramCredentialsResponse, error) {
	var out *controllerv1.AlterUserScramCredentialsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.AlterUserScramCredentials(ctx, req)
		return err
	})
	return out, err
}

// DescribeUserScramCredentials lists users with their SCRAM mechanisms and
// iteration counts (never salts or keys); no names lists every user.
func (c *Client) DescribeUserScramCredentials(ctx context.Context, users ...string) (*controllerv1.DescribeUserScramCredentialsResponse, error) {
	var out *controllerv1.DescribeUserScramCredentialsResponse
	err := c.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeUserScramCredentials(ctx, &controllerv1.DescribeUserScramCredentialsRequest{Users: users})
		return err
	})
	return out, err
}

// basicAuth sends a user name and password with every call as
// "authorization: Basic base64(user:password)" metadata. It requires
// transport security: gRPC refuses to send it over a plaintext connection.
type basicAuth struct{ header string }

func newBasicAuth(user, password string) (*basicAuth, error) {
	for _, r := range user {
		if r == ':' {
			return nil, errs.New(errs.InvalidRequest, "user name %q contains ':', which Basic credentials cannot carry", user)
		}
	}
	return &basicAuth{header: "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}, nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b *basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// password never travels in clear text.
func (b *basicAuth) RequireTransportSecurity() bool { return true }
