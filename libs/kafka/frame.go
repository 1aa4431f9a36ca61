package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// apiVersionsKey is ApiVersions' API key; the listener answers it itself.
const apiVersionsKey = 18

// header is a request header (v1, or v2 with tagged fields for flexible
// versions). The client id is a nullable non-compact string in both.
type header struct {
	key           int16
	version       int16
	correlationID int32
	clientID      string
}

// minHeaderBytes is key, version, correlation id and the client id's
// length.
const minHeaderBytes = 2 + 2 + 4 + 2

var errShortHeader = errors.New("request shorter than its header")

// parseHeader reads the fixed part of a request header and returns the
// rest of the frame: tagged fields (for flexible versions) and body.
func parseHeader(frame []byte) (header, []byte, error) {
	if len(frame) < minHeaderBytes {
		return header{}, nil, errShortHeader
	}
	h := header{
		key:           int16(binary.BigEndian.Uint16(frame[0:])),
		version:       int16(binary.BigEndian.Uint16(frame[2:])),
		correlationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	n := int(int16(binary.BigEndian.Uint16(frame[8:])))
	rest := frame[minHeaderBytes:]
	if n > 0 { // -1 is a null client id, other negatives are read as null too, as Kafka does
		if n > len(rest) {
			return header{}, nil, fmt.Errorf("client id of %d bytes in a frame with %d left", n, len(rest))
		}
		h.clientID, rest = string(rest[:n]), rest[n:]
	}
	return h, rest, nil
}

// skipTags skips a tagged-field section (header v2): a count, then per
// field a tag, a size and that many bytes. Counts and sizes are bounded by
// the bytes left before anything is skipped.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("bad tagged-field count")
	}
	b = b[n:]
	if count > uint64(len(b)) {
		return nil, fmt.Errorf("%d tagged fields in %d bytes", count, len(b))
	}
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("bad tagged-field size")
		}
		b = b[n:]
		if size > uint64(len(b)) {
			return nil, fmt.Errorf("tagged field of %d bytes with %d left", size, len(b))
		}
		b = b[size:]
	}
	return b, nil
}

// decodeBody decodes the rest of a request after the fixed header (the
// header's tagged fields, then the body) of key at version into a fresh
// kmsg request. The body must not be reused afterwards: byte fields (record
// batches) alias it rather than copy it.
//
// kmsg (v1.15.1) refuses an array length larger than the bytes left, the
// fix of KAFKA-14063, so no length makes it allocate more than the frame's
// size times the size of one element struct; the frame itself is bounded
// by Config.MaxRequestBytes. A panic in the decoder is turned into an
// error so a malformed frame can only close its connection.
func decodeBody(key, version int16, rest []byte) (req kmsg.Request, err error) {
	defer func() {
		if r := recover(); r != nil {
			req, err = nil, fmt.Errorf("decoding %s v%d: %v", kmsg.NameForKey(key), version, r)
		}
	}()
	req = kmsg.RequestForKey(key)
	if req == nil {
		return nil, fmt.Errorf("unknown API key %d", key)
	}
	req.SetVersion(version)
	// The header is v2 (with tagged fields) exactly when the body's
	// version is flexible, ApiVersions v3+ included.
	if req.IsFlexible() {
		if rest, err = skipTags(rest); err != nil {
			return nil, fmt.Errorf("request header of %s v%d: %w", kmsg.NameForKey(key), version, err)
		}
	}
	if err := req.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("decoding %s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	return req, nil
}

// appendResponse appends a size-prefixed response frame: header v0 (the
// correlation id), or v1 (plus empty tagged fields) when flexibleHeader,
// then the body at resp's version.
func appendResponse(dst []byte, correlationID int32, flexibleHeader bool, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlationID))
	if flexibleHeader {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// responseHeaderFlexible reports whether the response header of key at a
// version whose body is flexible is v1. ApiVersions' response header is
// always v0, so a client that does not yet know which versions are served
// can always read the error code (KIP-511).
func responseHeaderFlexible(key int16, bodyFlexible bool) bool {
	return bodyFlexible && key != apiVersionsKey
}
