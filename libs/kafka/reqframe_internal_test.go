package kafka

import "github.com/sluice-io/sluice/libs/client/wire"

// Every test of the package runs with freed request frames overwritten
// before they go back to the pool: whatever reads a frame after it was
// freed reads 0xdb bytes instead of, by luck, the bytes it expects.
func init() {
	releaseRequestFrame = func(buf *[]byte) {
		b := (*buf)[:cap(*buf)]
		for i := range b {
			b[i] = 0xdb
		}
		wire.BufferPool().Put(buf)
	}
}
