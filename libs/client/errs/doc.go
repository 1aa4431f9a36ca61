// Package errs is Sluice's one error catalog: every error a service returns
// carries a stable Code (the number Kafka uses where Kafka has the error),
// whether it is retriable, and the gRPC status it maps to. Hints (the current
// leader, coordinator or controller) travel in status details so a client
// can redirect without another metadata call.
//
// Servers return *Error from handlers; grpc-go turns it into a status through
// GRPCStatus. Multi-item responses carry Proto() per item. Clients turn any
// error back into an *Error with From.
//
//	err := errs.New(errs.NotLeaderOrFollower, "node %d does not lead %s-%d", id, topic, p).
//		WithLeader(&edpb.LeaderHint{Topic: topic, Partition: p, LeaderId: 2, LeaderAddress: "10.0.0.2:9090"})
//	...
//	if e := errs.From(err); e.Code == errs.NotLeaderOrFollower && e.Leader != nil {
//		redial(e.Leader.GetLeaderAddress())
//	}
package errs
