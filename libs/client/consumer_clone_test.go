package client

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/client/record"
)

// A decompressed record's header key is a string over the iterator's
// reused buffer (kmsg's UnsafeReadFrom); the consumer's copy must own it,
// or the next batch decompressed into the buffer rewrites the key of a
// record already delivered.
func TestCloneHeadersOwnsKeys(t *testing.T) {
	buf := []byte("trace-idvalue")
	in := []record.Header{{Key: unsafe.String(&buf[0], 8), Value: buf[8:]}}
	out := cloneHeaders(in)
	for i := range buf {
		buf[i] = 0
	}
	require.Equal(t, []record.Header{{Key: "trace-id", Value: []byte("value")}}, out)
}
