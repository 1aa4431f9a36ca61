package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/scram"
)

// maxScramChanges bounds the credentials one AlterUserScramCredentials
// request may touch.
const maxScramChanges = 1000

// applyScramUser applies one users/scram/<user> event.
func (s *state) applyScramUser(user string, kv *mvccpb.KeyValue, deleted bool, ch *change) error {
	ch.scramUsers[user] = true
	if deleted {
		delete(s.scramUsers, user)
		return nil
	}
	u := &controllerv1.UserScramCredentials{}
	if err := proto.Unmarshal(kv.Value, u); err != nil {
		return fmt.Errorf("decoding SCRAM credentials of %q: %w", user, err)
	}
	s.scramUsers[user] = &versioned[*controllerv1.UserScramCredentials]{val: u, modRev: kv.ModRevision}
	return nil
}

// scramImage renders the SCRAM users for the metadata image.
func (s *state) scramImage() map[string]*controllerv1.UserScramCredentials {
	out := make(map[string]*controllerv1.UserScramCredentials, len(s.scramUsers))
	for name, u := range s.scramUsers {
		out[name] = u.val
	}
	return out
}

// scramDelta adds the SCRAM users ch touched to d.
func (s *state) scramDelta(ch *change, d *controllerv1.MetadataDelta) {
	for _, name := range slices.Sorted(mapKeys(ch.scramUsers)) {
		if u, ok := s.scramUsers[name]; ok {
			d.UpsertedScramUsers = append(d.UpsertedScramUsers, u.val)
		} else {
			d.DeletedScramUsers = append(d.DeletedScramUsers, name)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// AlterUserScramCredentials creates, replaces and deletes SCRAM
// credentials. Each user's changes are one etcd write compared on the
// user's record, so concurrent changes to one user never lose each other.
// A user whose request entries are invalid changes nothing; other users are
// not affected.
func (c *Controller) AlterUserScramCredentials(ctx context.Context, r *controllerv1.AlterUserScramCredentialsRequest) (*controllerv1.AlterUserScramCredentialsResponse, error) {
	if err := c.checkCluster(ctx, authz.Alter); err != nil {
		return nil, err
	}
	if n := len(r.GetUpsertions()) + len(r.GetDeletions()); n == 0 || n > maxScramChanges {
		return nil, errs.New(errs.InvalidRequest, "a request must change between 1 and %d credentials, not %d", maxScramChanges, n)
	}
	t, err := c.activeTerm()
	if err != nil {
		return nil, err
	}
	type userChange struct {
		upserts []*controllerv1.ScramCredential
		deletes []scram.Mechanism
		err     error
	}
	var order []string
	changes := map[string]*userChange{}
	get := func(user string) *userChange {
		uc, ok := changes[user]
		if !ok {
			uc = &userChange{}
			changes[user] = uc
			order = append(order, user)
		}
		return uc
	}
	seen := map[string]map[scram.Mechanism]bool{}
	dup := func(user string, m scram.Mechanism) bool {
		if seen[user] == nil {
			seen[user] = map[scram.Mechanism]bool{}
		}
		d := seen[user][m]
		seen[user][m] = true
		return d
	}
	for _, d := range r.GetDeletions() {
		uc := get(d.GetUser())
		switch {
		case uc.err != nil:
		case scram.ValidateUser(d.GetUser()) != nil:
			uc.err = scram.ValidateUser(d.GetUser())
		case scram.Name(d.GetMechanism()) == "":
			uc.err = errs.New(errs.InvalidRequest, "user %q: mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512", d.GetUser())
		case dup(d.GetUser(), d.GetMechanism()):
			uc.err = errs.New(errs.InvalidRequest, "user %q: %s is changed twice in one request", d.GetUser(), scram.Name(d.GetMechanism()))
		default:
			uc.deletes = append(uc.deletes, d.GetMechanism())
		}
	}
	for _, u := range r.GetUpsertions() {
		uc := get(u.GetUser())
		if uc.err != nil {
			continue
		}
		cred, err := scram.CredentialFrom(u)
		switch {
		case err != nil:
			uc.err = err
		case dup(u.GetUser(), u.GetMechanism()):
			uc.err = errs.New(errs.InvalidRequest, "user %q: %s is changed twice in one request", u.GetUser(), scram.Name(u.GetMechanism()))
		default:
			uc.upserts = append(uc.upserts, cred)
		}
	}
	out := &controllerv1.AlterUserScramCredentialsResponse{}
	for _, user := range order {
		uc := changes[user]
		err := uc.err
		if err == nil {
			err = c.alterScramUser(ctx, t, user, uc.upserts, uc.deletes)
		}
		if err != nil {
			c.logger.Info("SCRAM credentials change refused", "user", user, "error", err)
		} else {
			c.logger.Info("SCRAM credentials changed", "user", user, "upserted", len(uc.upserts), "deleted", len(uc.deletes))
		}
		out.Results = append(out.Results, &controllerv1.AlterUserScramCredentialsResult{User: user, Error: errs.ItemError(err)})
	}
	return out, nil
}

// alterScramUser writes one user's new credential set.
func (c *Controller) alterScramUser(ctx context.Context, t *term, user string, upserts []*controllerv1.ScramCredential, deletes []scram.Mechanism) error {
	_, err := c.update(ctx, t, func(st *state) (*txn, error) {
		cur, exists := st.scramUsers[user]
		next := &controllerv1.UserScramCredentials{User: user}
		var modRev int64
		if exists {
			modRev = cur.modRev
			next.Credentials = slices.Clone(cur.val.GetCredentials())
		}
		for _, m := range deletes {
			i := slices.IndexFunc(next.Credentials, func(c *controllerv1.ScramCredential) bool { return c.GetMechanism() == m })
			if i < 0 {
				return nil, errs.New(errs.ResourceNotFound, "user %q has no %s credential to delete", user, scram.Name(m))
			}
			next.Credentials = slices.Delete(next.Credentials, i, i+1)
		}
		for _, cr := range upserts {
			i := slices.IndexFunc(next.Credentials, func(c *controllerv1.ScramCredential) bool { return c.GetMechanism() == cr.GetMechanism() })
			if i >= 0 {
				next.Credentials[i] = cr
			} else {
				next.Credentials = append(next.Credentials, cr)
			}
		}
		sort.Slice(next.Credentials, func(i, j int) bool { return next.Credentials[i].GetMechanism() < next.Credentials[j].GetMechanism() })
		x := &txn{}
		if len(next.Credentials) == 0 {
			c.del(x, metastore.ScramUserKey(user), modRev)
		} else {
			c.put(x, metastore.ScramUserKey(user), modRev, next)
		}
		return x, nil
	})
	return err
}

// DescribeUserScramCredentials lists users with their mechanisms and
// iteration counts, never salts or keys.
func (c *Controller) DescribeUserScramCredentials(ctx context.Context, r *controllerv1.DescribeUserScramCredentialsRequest) (*controllerv1.DescribeUserScramCredentialsResponse, error) {
	if err := c.checkCluster(ctx, authz.Describe); err != nil {
		return nil, err
	}
	if err := c.catchUp(ctx); err != nil {
		return nil, err
	}
	img := c.cache.Load()
	users := r.GetUsers()
	all := len(users) == 0
	if all {
		for name := range img.ScramUsers {
			users = append(users, name)
		}
	}
	sort.Strings(users)
	users = slices.Compact(users)
	out := &controllerv1.DescribeUserScramCredentialsResponse{}
	for _, name := range users {
		res := &controllerv1.DescribeUserScramCredentialsResult{User: name}
		u, ok := img.ScramUsers[name]
		switch {
		case scram.ValidateUser(name) != nil && !all:
			res.Error = errs.ItemError(scram.ValidateUser(name))
		case !ok:
			res.Error = errs.ItemError(errs.New(errs.ResourceNotFound, "user %q has no SCRAM credentials", name))
		default:
			for _, cr := range u.GetCredentials() {
				res.Credentials = append(res.Credentials, &controllerv1.ScramCredentialInfo{Mechanism: cr.GetMechanism(), Iterations: cr.GetIterations()})
			}
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}
