package kafka

import (
	"context"
	"regexp"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/libs/client/errs"
)

// unsupportedVersion is Kafka's UNSUPPORTED_VERSION. It is a wire-protocol
// answer only (no gRPC call can ask for a version), so the catalog does not
// carry it.
const unsupportedVersion int16 = 35

// apiVersionsMax is the newest ApiVersions version served.
const apiVersionsMax = 4

// clientSoftware is what KIP-511 allows in ApiVersions v3+'s client
// software name and version.
var clientSoftware = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

// apiVersions answers ApiVersions from what the mux serves, ApiVersions
// included.
func (s *Server) apiVersions(_ context.Context, req *Request) (Reply, error) {
	r := req.Msg.(*kmsg.ApiVersionsRequest)
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.Version >= 3 && (!clientSoftware.MatchString(r.ClientSoftwareName) || !clientSoftware.MatchString(r.ClientSoftwareVersion)) {
		resp.ErrorCode = ErrorCode(errs.New(errs.InvalidRequest, "client software name %q or version %q is not [a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?",
			r.ClientSoftwareName, r.ClientSoftwareVersion))
		return Now(resp), nil
	}
	resp.ApiKeys = s.mux.Versions()
	return Now(resp), nil
}

// unsupportedApiVersions is the answer to an ApiVersions request of a
// version not served: v0 with UNSUPPORTED_VERSION and the keys served, so
// the client retries with a version both know (KIP-511). Its body was not
// read: a newer version's layout is unknown.
func (s *Server) unsupportedApiVersions() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = unsupportedVersion
	resp.ApiKeys = s.mux.Versions()
	return resp
}
