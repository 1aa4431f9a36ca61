package wire

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// SplitField walks the fields of an encoded message. Each field numbered
// num with the bytes wire type goes to fn (its value pointing into b); other
// reports every other field's number; the other fields come back as
// encoded, for the protobuf decoder.
func SplitField(b []byte, num protowire.Number, fn func(v []byte) error, other func(n protowire.Number)) ([]byte, error) {
	var rest []byte
	for len(b) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return nil, protowire.ParseError(tagLen)
		}
		valLen := protowire.ConsumeFieldValue(n, typ, b[tagLen:])
		if valLen < 0 {
			return nil, protowire.ParseError(valLen)
		}
		field := b[:tagLen+valLen]
		b = b[tagLen+valLen:]
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(field[tagLen:])
			if err := fn(v); err != nil {
				return nil, err
			}
			continue
		}
		if other != nil {
			other(n)
		}
		rest = append(rest, field...)
	}
	return rest, nil
}

// UnmarshalAliasing decodes b into m as proto.Unmarshal does, except that
// the bytes field numbered num (a singular field outside any oneof) is not
// copied: set receives its value, pointing into b, if it is present.
func UnmarshalAliasing(b []byte, m proto.Message, num protowire.Number, set func([]byte)) error {
	var last []byte
	seen := false
	rest, err := SplitField(b, num, func(v []byte) error {
		last, seen = v, true // the last occurrence wins
		return nil
	}, nil)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return err
	}
	if seen {
		set(last)
	}
	return nil
}
