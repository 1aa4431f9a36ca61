package nodeapi

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/scram"
)

const (
	describeScramMin, describeScramMax = 0, 0
	alterScramMin, alterScramMax       = 0, 0
)

// describeUserScram answers DescribeUserScramCredentials (50) from the
// active controller: mechanisms and iterations, never salts or keys. An
// empty or null user list describes every user.
func (n *node) describeUserScram(ctx context.Context, req *kmsg.DescribeUserSCRAMCredentialsRequest) *kmsg.DescribeUserSCRAMCredentialsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrDescribeUserSCRAMCredentialsResponse()
	// Describe on the cluster (Kafka's rule), for the whole request.
	if err := authz.Check(ctx, n.authz, authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	in := &controllerv1.DescribeUserScramCredentialsRequest{}
	seen := map[string]bool{}
	for _, u := range req.Users {
		if seen[u.Name] {
			resp.ErrorCode, resp.ErrorMessage = kafkaError(errorf(errs.InvalidRequest, "user %q appears more than once in the request", u.Name))
			return resp
		}
		seen[u.Name] = true
		in.Users = append(in.Users, u.Name)
	}
	var out *controllerv1.DescribeUserScramCredentialsResponse
	err := n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
		var err error
		out, err = cc.DescribeUserScramCredentials(ctx, in)
		return err
	})
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
		return resp
	}
	for _, r := range out.GetResults() {
		rr := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		rr.User = r.GetUser()
		if e := errs.FromProto(r.GetError()); e != nil {
			rr.ErrorCode, rr.ErrorMessage = protoError(e)
		}
		for _, c := range r.GetCredentials() {
			ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			ci.Mechanism, ci.Iterations = int8(c.GetMechanism()), c.GetIterations()
			rr.CredentialInfos = append(rr.CredentialInfos, ci)
		}
		resp.Results = append(resp.Results, rr)
	}
	return resp
}

// alterUserScram answers AlterUserScramCredentials (51) through the active
// controller, which validates each user's changes and stores StoredKey and
// ServerKey derived from the salted password the client sent.
func (n *node) alterUserScram(ctx context.Context, req *kmsg.AlterUserSCRAMCredentialsRequest) *kmsg.AlterUserSCRAMCredentialsResponse {
	ctx, cancel := n.callTimeout(ctx, 0)
	defer cancel()
	resp := kmsg.NewPtrAlterUserSCRAMCredentialsResponse()
	in := &controllerv1.AlterUserScramCredentialsRequest{}
	var order []string
	refused := map[string]error{}
	note := func(user string) {
		if _, ok := refused[user]; !ok {
			refused[user] = nil
			order = append(order, user)
		}
	}
	mechanism := func(user string, m int8) (scram.Mechanism, bool) {
		mech := scram.Mechanism(m)
		if scram.Name(mech) == "" {
			if refused[user] == nil {
				refused[user] = errorf(errs.UnsupportedSaslMechanism, "user %q: unknown SCRAM mechanism %d (1 is SCRAM-SHA-256, 2 SCRAM-SHA-512)", user, m)
			}
			return 0, false
		}
		return mech, true
	}
	for _, d := range req.Deletions {
		note(d.Name)
		if m, ok := mechanism(d.Name, d.Mechanism); ok {
			in.Deletions = append(in.Deletions, &controllerv1.ScramCredentialDeletion{User: d.Name, Mechanism: m})
		}
	}
	for _, u := range req.Upsertions {
		note(u.Name)
		if m, ok := mechanism(u.Name, u.Mechanism); ok {
			in.Upsertions = append(in.Upsertions, &controllerv1.ScramCredentialUpsertion{
				User: u.Name, Mechanism: m, Iterations: u.Iterations, Salt: u.Salt, SaltedPassword: u.SaltedPassword})
		}
	}
	// Alter on the cluster (Kafka's rule): without it every user is
	// refused.
	if err := authz.Check(ctx, n.authz, authz.Alter, authz.Cluster, authz.ClusterName); err != nil {
		for _, user := range order {
			refused[user] = err
		}
	}
	// A user with a refused entry changes nothing.
	in.Deletions = dropUsers(in.Deletions, refused, func(d *controllerv1.ScramCredentialDeletion) string { return d.GetUser() })
	in.Upsertions = dropUsers(in.Upsertions, refused, func(u *controllerv1.ScramCredentialUpsertion) string { return u.GetUser() })
	results := map[string]*controllerv1.AlterUserScramCredentialsResult{}
	var callErr error
	if len(in.Deletions)+len(in.Upsertions) > 0 {
		callErr = n.onController(ctx, func(ctx context.Context, cc controllerv1.ControllerServiceClient) error {
			out, err := cc.AlterUserScramCredentials(ctx, in)
			for _, r := range out.GetResults() {
				results[r.GetUser()] = r
			}
			return err
		})
	}
	for _, user := range order {
		rr := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		rr.User = user
		switch {
		case refused[user] != nil:
			rr.ErrorCode, rr.ErrorMessage = kafkaError(refused[user])
		case callErr != nil:
			rr.ErrorCode, rr.ErrorMessage = kafkaError(callErr)
		default:
			if e := errs.FromProto(results[user].GetError()); e != nil {
				rr.ErrorCode, rr.ErrorMessage = protoError(e)
			}
		}
		resp.Results = append(resp.Results, rr)
	}
	return resp
}

func dropUsers[T any](xs []T, refused map[string]error, user func(T) string) []T {
	out := xs[:0]
	for _, x := range xs {
		if refused[user(x)] == nil {
			out = append(out, x)
		}
	}
	return out
}
