package errs

import (
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
)

// Code is Sluice's stable error code (the generated ErrorCode enum). Where
// Kafka has the same error, the number is Kafka's code.
type Code = edpb.ErrorCode

// Entry is one row of the catalog.
type Entry struct {
	// Retriable says whether the same request may succeed later, possibly
	// after a metadata refresh or after following a hint. It follows Kafka's
	// classification for codes Kafka has.
	Retriable bool
	// GRPC is the gRPC status code a whole-call failure with this code maps
	// to.
	GRPC codes.Code
	// Kafka is the Kafka protocol error code to answer with; -1
	// (UNKNOWN_SERVER_ERROR) where Kafka has no equivalent.
	Kafka int16
}

// catalog is derived from the ErrorCode enum's CatalogEntry options: the
// proto is the one table of codes, retriability and gRPC mapping. The Kafka
// code is the enum number where Kafka has the error (numbers below 1000).
var catalog = func() map[Code]Entry {
	vals := edpb.ErrorCode(0).Descriptor().Values()
	m := make(map[Code]Entry, vals.Len())
	for i := 0; i < vals.Len(); i++ {
		v := vals.Get(i)
		row, _ := proto.GetExtension(v.Options(), edpb.E_Catalog).(*edpb.CatalogEntry)
		if row == nil {
			// A code added to the proto without its option: TestEveryCodeHasAnEntry
			// fails; until then Lookup treats it as unknown.
			continue
		}
		var g codes.Code
		if err := g.UnmarshalJSON([]byte(strconv.Quote(row.GetGrpc()))); err != nil {
			continue // same: the test names the bad value
		}
		kafka := int16(-1)
		if v.Number() < 1000 {
			kafka = int16(v.Number())
		}
		m[Code(v.Number())] = Entry{Retriable: row.GetRetriable(), GRPC: g, Kafka: kafka}
	}
	return m
}()

// Lookup returns the catalog entry of a code. An unknown code (from a newer
// server) is treated as a non-retriable internal error.
func Lookup(c Code) Entry {
	if e, ok := catalog[c]; ok {
		return e
	}
	return Entry{Retriable: false, GRPC: codes.Internal, Kafka: -1}
}

// Name returns the code's short name, such as "NOT_LEADER_OR_FOLLOWER".
func Name(c Code) string {
	n := c.String()
	const prefix = "ERROR_CODE_"
	if len(n) > len(prefix) && n[:len(prefix)] == prefix {
		return n[len(prefix):]
	}
	return n
}
