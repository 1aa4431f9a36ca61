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
// version not served: v0 with UNSUPPORTED_VERSION and, as Kafka answers it
// (KIP-511), only ApiVersions' own entry, so the client retries with the
// newest version both know and learns the rest from that answer (franz-go
// retries only when the entry is alone; Kafka's Java client and librdkafka
// look the entry up). Its body was not read: a newer version's layout is
// unknown.
func (s *Server) unsupportedApiVersions() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = unsupportedVersion
	own := kmsg.NewApiVersionsResponseApiKey()
	own.ApiKey, own.MinVersion, own.MaxVersion = apiVersionsKey, 0, apiVersionsMax
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{own}
	return resp
}
