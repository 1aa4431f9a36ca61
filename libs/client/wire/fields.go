package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FieldNumber returns the number of m's field called name, from the
// generated descriptor. Codecs that encode or split messages by hand take
// their field numbers from here, so the proto file stays their one source.
// It panics on a name m does not have: call it at package initialisation,
// where a renamed field fails every test at once.
func FieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("grpcx: %s has no field %q", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return fd.Number()
}
