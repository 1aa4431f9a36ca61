package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ceilings follow the cipher's cost: a produce charges the server the
// open, a consume the seal, and the shared-cores bound counts both.
func TestSecurityCeilings(t *testing.T) {
	h := &harness{servers: map[string]string{}, facts: facts{Cores: 2}}
	gb := 1024 * 1024 * 1024 / 1e9 // 1 Mi records of 1 KiB
	for r := 1; r <= 3; r++ {
		h.samples = append(h.samples,
			sample{Figure: securityAEADFigure, Round: r, Values: figures{"seal_cpu_s_per_gb": 0.25, "open_cpu_s_per_gb": 0.20,
				"seal_gb_per_s": 4, "open_gb_per_s": 5, "client_cpu_s": 2}},
			// Plaintext: server 1.0 s/GB, client 1.5 s/GB, 800 MB/s.
			sample{Figure: "security.plain.grpc_produce", Round: r, Values: figures{"mb_per_s": 800, "server_cpu_s_per_gb": 1.0, "client_cpu_s": 1.5 * gb}},
			sample{Figure: "security.tls.grpc_produce", Round: r, Values: figures{"mb_per_s": 600, "server_cpu_s_per_gb": 1.4, "client_cpu_s": 2 * gb}},
			sample{Figure: "security.plain.grpc_consume", Round: r, Values: figures{"mb_per_s": 1000, "server_cpu_s_per_gb": 0.5, "client_cpu_s": 1.0 * gb}},
			sample{Figure: "security.tls.grpc_consume", Round: r, Values: figures{"mb_per_s": 700, "server_cpu_s_per_gb": 0.8, "client_cpu_s": 1.2 * gb}},
		)
	}
	rep := buildSecurityReport(h, securityConfig{records: 1 << 20, rounds: 3}, 0, "", "")
	rows := map[string]securityRow{}
	for _, row := range rep.Rows {
		rows[row.ID] = row
	}
	p := rows["grpc_produce"].Ceiling
	require.NotNil(t, p)
	require.InDelta(t, 0.45, p.CipherSPerGB, 1e-9)
	require.InDelta(t, 0.20, p.ServerCipherSPerGB, 1e-9, "a produce's server opens")
	require.InDelta(t, 2.5/(2.5+0.45), p.SharedCores, 1e-9)
	require.InDelta(t, 1.0/1.2, p.ServerAlone, 1e-9)
	require.InDelta(t, 0.8*2.5, p.PlainCoresBusy, 1e-9)
	c := rows["grpc_consume"].Ceiling
	require.NotNil(t, c)
	require.InDelta(t, 0.25, c.ServerCipherSPerGB, 1e-9, "a consume's server seals")
	require.InDelta(t, 1.5/(1.5+0.45), c.SharedCores, 1e-9)
	require.InDelta(t, 0.5/0.75, c.ServerAlone, 1e-9)
	require.Nil(t, rows["kafka_produce"].Ceiling, "no plaintext figures, no ceiling")
	md := rep.markdown()
	require.Contains(t, md, "| produce, SDK over gRPC | 0.450 | 2.00 of 2 | 0.85 | 0.83 | 0.75 |")

	// Without the cipher's figures the report says so instead of a bound.
	h.samples = slices.DeleteFunc(h.samples, func(s sample) bool { return s.Figure == securityAEADFigure })
	rep = buildSecurityReport(h, securityConfig{records: 1 << 20, rounds: 3}, 0, "", "")
	require.Nil(t, rep.Rows[0].Ceiling)
	require.Contains(t, rep.markdown(), "The record cipher was not measured")
}

// Every AEAD suite crypto/tls offers can be measured; others are refused
// with the reason.
func TestSuiteAEAD(t *testing.T) {
	for _, name := range []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
		"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"} {
		a, err := suiteAEAD(name)
		require.NoError(t, err, name)
		require.Equal(t, 16, a.Overhead(), name)
	}
	_, err := suiteAEAD("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA")
	require.ErrorContains(t, err, "only AEAD suites")
	_, err = suiteAEAD("nonsense")
	require.ErrorContains(t, err, "not a cipher suite")
}
