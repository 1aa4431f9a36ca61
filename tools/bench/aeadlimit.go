package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/sys/unix"
)

// limitAEAD measures the record cipher of a TLS cipher suite on one core:
// sealing and opening full 16 KiB records with the same Go implementation
// crypto/tls uses. A byte sent over TLS is sealed on one side and opened on
// the other, so seal plus open per GB is CPU no TLS stack built on Go's
// crypto can avoid: the floor under the TLS side of the security benchmark.
func limitAEAD(args []string) error {
	fs := flag.NewFlagSet("limit-aead", flag.ExitOnError)
	suite := fs.String("suite", "TLS_AES_128_GCM_SHA256", "cipher suite whose record cipher to measure, as crypto/tls names it")
	dur := fs.Duration("dur", time.Second, "time spent sealing, then the same opening")
	_ = fs.Parse(args) // ExitOnError
	aead, err := suiteAEAD(*suite)
	if err != nil {
		return err
	}
	// One OS thread, so its CPU time is the cipher's alone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const record = 16 << 10
	plain := make([]byte, record)
	for i := range plain {
		plain[i] = byte(i * 13)
	}
	nonce := make([]byte, aead.NonceSize())
	header := []byte{23, 3, 3, byte((record + aead.Overhead()) >> 8), byte(record + aead.Overhead())}
	sealed := aead.Seal(nil, nonce, plain, header)
	out := make([]byte, 0, len(sealed))
	seal := func() error { out = aead.Seal(out[:0], nonce, plain, header); return nil }
	open := func() error {
		var err error
		out, err = aead.Open(out[:0], nonce, sealed, header)
		return err
	}
	f := figures{}
	for _, op := range []struct {
		name string
		do   func() error
	}{{"seal", seal}, {"open", open}} {
		cpu0, err := threadCPU()
		if err != nil {
			return err
		}
		start := time.Now()
		var n int64
		for time.Since(start) < *dur {
			for range 64 {
				if err := op.do(); err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
			}
			n += 64 * record
		}
		wall := time.Since(start).Seconds()
		cpu1, err := threadCPU()
		if err != nil {
			return err
		}
		gb := float64(n) / 1e9
		f[op.name+"_gb_per_s"] = gb / wall
		f[op.name+"_cpu_s_per_gb"] = (cpu1 - cpu0) / gb
	}
	return printFigures(f)
}

// suiteAEAD builds the record cipher of a TLS 1.3 or TLS 1.2 AEAD suite
// with a zero key (the key does not change the speed).
func suiteAEAD(suite string) (cipher.AEAD, error) {
	known := false
	for _, s := range tls.CipherSuites() {
		known = known || s.Name == suite
	}
	switch {
	case !known:
		return nil, fmt.Errorf("--suite %q is not a cipher suite crypto/tls supports", suite)
	case strings.Contains(suite, "AES_128_GCM"), strings.Contains(suite, "AES_256_GCM"):
		keyLen := 16
		if strings.Contains(suite, "AES_256") {
			keyLen = 32
		}
		block, err := aes.NewCipher(make([]byte, keyLen))
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(block)
	case strings.Contains(suite, "CHACHA20_POLY1305"):
		return chacha20poly1305.New(make([]byte, chacha20poly1305.KeySize))
	}
	return nil, fmt.Errorf("--suite %q: only AEAD suites (AES-GCM, ChaCha20-Poly1305) are measured", suite)
}

// threadCPU is the calling OS thread's user+system CPU seconds.
func threadCPU() (float64, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, err
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, nil
}
