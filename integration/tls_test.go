package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/tlsx"
)

// A cluster with TLS everywhere (one controller, one storage node, so
// role-to-role connections and the etcd member are TLS too) serves clients
// that trust its CA over both protocols; a plaintext client, an untrusted
// certificate and an expired one are refused on the gRPC, Kafka and etcd
// ports; replacing a node's certificate files is picked up by new
// connections without a restart while connections made before keep working.
func TestTLSCluster(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Controllers: 1, StorageNodes: 1, TLS: true})
	files := c.TLS()
	require.NotNil(t, files)
	ctrl, storage := c.Controllers()[0], c.StorageNodes()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The CLI with the CA and the admin certificate: a round trip over gRPC.
	cli := func(stdin string, args ...string) (string, error) {
		full := append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","), "--request-timeout", "20s",
			"--tls-ca", files.CA, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey}, args...)
		cmd := exec.CommandContext(ctx, cluster.CLI(t), full...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if err != nil {
			return out.String(), &cliError{err: err, stderr: errOut.String()}
		}
		return out.String(), nil
	}
	_, err := cli("", "topic", "create", "t", "--partitions", "1", "--replication-factor", "1")
	require.NoError(t, err)
	_, err = cli(seqLines(1000), "produce", "t", "--acks", "all")
	require.NoError(t, err)
	out, err := cli("", "consume", "t", "--from-beginning", "--max-messages", "1000", "--timeout", "20s")
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), 1000)

	// A Kafka client over TLS reads the same records.
	adminTLS, err := files.ClientTLS()
	require.NoError(t, err)
	kc, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(adminTLS.Clone()),
		kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	fetched := 0
	for fetched < 1000 && ctx.Err() == nil {
		fs := kc.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fetched += fs.NumRecords()
	}
	kc.Close()
	require.Equal(t, 1000, fetched)

	// A plaintext SDK client against the TLS port fails with an error,
	// promptly, instead of hanging.
	plain, err := client.New(client.Config{Bootstrap: []string{ctrl.Addr}, RequestTimeout: 3 * time.Second})
	require.NoError(t, err)
	start := time.Now()
	_, err = plain.DescribeCluster(ctx)
	_ = plain.Close()
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	t.Logf("plaintext gRPC client: %v", err)
	// The CLI says what to do.
	cmd := exec.CommandContext(ctx, cluster.CLI(t), "--bootstrap", ctrl.Addr, "--request-timeout", "3s", "cluster", "describe")
	msg, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(msg), "pass --tls-ca", "the CLI says to connect with TLS")
	t.Logf("plaintext CLI: %s", msg)
	// A plaintext Kafka client: the listener closes the connection.
	kp, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.RequestRetries(0), kgo.RetryTimeout(2*time.Second))
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	require.Error(t, kp.Ping(pctx), "plaintext Kafka client against the TLS listener")
	pcancel()
	kp.Close()

	// Certificates the cluster must refuse: one from another CA, and an
	// expired one from the cluster's own CA.
	otherCA, err := tlsx.NewCA("untrusted CA", time.Hour)
	require.NoError(t, err)
	ownCA, err := tlsx.LoadCA(files.CA, files.CAKey)
	require.NoError(t, err)
	untrusted := clientCert(t, otherCA, tlsx.Issue{Subject: pkix.Name{CommonName: "mallory"}, Validity: time.Hour})
	expired := clientCert(t, ownCA, tlsx.Issue{Subject: pkix.Name{CommonName: "admin"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	caPool := x509.NewCertPool()
	caPEM, err := os.ReadFile(files.CA)
	require.NoError(t, err)
	require.True(t, caPool.AppendCertsFromPEM(caPEM))
	// The certificate is sent whatever CAs the server names as acceptable
	// (crypto/tls would otherwise leave an untrusted one out and connect
	// anonymously, which --tls.client-auth=request allows).
	with := func(cert tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: caPool, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
	}
	good := adminTLS.Clone()
	good.ServerName = "127.0.0.1"
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{{"admin", good, true}, {"untrusted", with(untrusted), false}, {"expired", with(expired), false}} {
		// gRPC: a health check.
		require.Equal(t, tc.ok, grpcHealthy(ctx, ctrl.Addr, tc.cfg) == nil, "gRPC with the %s certificate", tc.name)
		// Kafka: a metadata round trip.
		require.Equal(t, tc.ok, kafkaPing(ctx, storage.KafkaAddr, tc.cfg) == nil, "Kafka with the %s certificate", tc.name)
		// etcd: the TLS handshake and a first read (with TLS 1.3 the
		// server's verdict on the client comes after the client's
		// handshake). etcd takes controllers only: even the admin's
		// client certificate is refused, on the client and peer ports.
		require.Error(t, tlsRoundTrip(ctrl.EtcdClientAddr, tc.cfg), "etcd client port with the %s certificate", tc.name)
		require.Error(t, tlsRoundTrip(ctrl.EtcdPeerAddr, tc.cfg), "etcd peer port with the %s certificate", tc.name)
	}
	ctrlCert, err := tls.LoadX509KeyPair(filepath.Join(files.Dir, "controller-1.crt"), filepath.Join(files.Dir, "controller-1.key"))
	require.NoError(t, err)
	require.NoError(t, tlsRoundTrip(ctrl.EtcdClientAddr, with(ctrlCert)), "etcd client port with the controller's certificate")
	storageKey, err := tls.LoadX509KeyPair(filepath.Join(files.Dir, "storage-1.crt"), filepath.Join(files.Dir, "storage-1.key"))
	require.NoError(t, err)
	require.Error(t, tlsRoundTrip(ctrl.EtcdClientAddr, with(storageKey)), "etcd client port with a storage node's certificate")
	// No client certificate at all: etcd refuses it (it requires one).
	require.Error(t, tlsRoundTrip(ctrl.EtcdClientAddr, &tls.Config{RootCAs: caPool, ServerName: "127.0.0.1"}))

	// Rotation: a new certificate for the controller, written over its
	// files. New connections to every port get it; the process is the same.
	pid := ctrl.PID()
	oldSerial := serverSerial(t, ctrl.Addr, good)
	pair, err := ownCA.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: "controller-1", Organization: []string{"Sluice dev"}},
		Roles: ctrl.Roles.Strings(), Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour})
	require.NoError(t, err)
	_, _, err = pair.WriteFiles(files.Dir, "controller-1")
	require.NoError(t, err)
	b, _ := pem.Decode(pair.CertPEM)
	newCert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	require.NotEqual(t, 0, oldSerial.Cmp(newCert.SerialNumber))
	for _, addr := range []string{ctrl.Addr, ctrl.KafkaAddr, ctrl.EtcdClientAddr} {
		require.Equal(t, 0, serverSerial(t, addr, good).Cmp(newCert.SerialNumber), "new certificate served on %s", addr)
	}
	require.Equal(t, pid, ctrl.PID(), "no restart")
	// The cluster goes on working: the storage node's connections to the
	// controller and new client connections.
	_, err = cli(seqLines(10), "produce", "t", "--acks", "all")
	require.NoError(t, err)
	_, err = cli("", "topic", "create", "t2", "--partitions", "1", "--replication-factor", "1")
	require.NoError(t, err)
	require.NoError(t, grpcHealthy(ctx, ctrl.Addr, good))

	// Rotation while a client streams: a Kafka producer sends half its
	// records, the storage node's certificate is replaced, the same
	// producer (its connection made before) and a new one (a connection
	// made after) send the rest; every record is read back once.
	_, err = cli("", "topic", "create", "r", "--partitions", "1", "--replication-factor", "1")
	require.NoError(t, err)
	produce := func(kc *kgo.Client, from, to int) {
		for i := from; i < to; i += 100 {
			var recs []*kgo.Record
			for j := i; j < min(i+100, to); j++ {
				recs = append(recs, &kgo.Record{Topic: "r", Value: []byte(strconv.Itoa(j))})
			}
			require.NoError(t, kc.ProduceSync(ctx, recs...).FirstErr())
		}
	}
	before, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(adminTLS.Clone()))
	require.NoError(t, err)
	defer before.Close()
	produce(before, 0, 1000)
	pair, err = ownCA.Issue(tlsx.Issue{Subject: pkix.Name{CommonName: "storage-1", Organization: []string{"Sluice dev"}},
		Roles: storage.Roles.Strings(), Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour})
	require.NoError(t, err)
	_, _, err = pair.WriteFiles(files.Dir, "storage-1")
	require.NoError(t, err)
	b, _ = pem.Decode(pair.CertPEM)
	storageCert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	produce(before, 1000, 1500)
	after, err := kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(adminTLS.Clone()))
	require.NoError(t, err)
	defer after.Close()
	produce(after, 1500, 2000)
	require.Equal(t, 0, serverSerial(t, storage.KafkaAddr, good).Cmp(storageCert.SerialNumber), "new certificate on the Kafka port")
	require.Equal(t, 0, serverSerial(t, storage.Addr, good).Cmp(storageCert.SerialNumber), "new certificate on the gRPC port")
	kc, err = kgo.NewClient(kgo.SeedBrokers(storage.KafkaAddr), kgo.DialTLSConfig(adminTLS.Clone()),
		kgo.ConsumeTopics("r"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer kc.Close()
	seen := map[string]bool{}
	for len(seen) < 2000 && ctx.Err() == nil {
		fs := kc.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			require.False(t, seen[string(r.Value)], "record %s read twice", r.Value)
			seen[string(r.Value)] = true
		})
	}
	require.Len(t, seen, 2000)
}

type cliError struct {
	err    error
	stderr string
}

func (e *cliError) Error() string { return e.err.Error() + ": " + e.stderr }

func clientCert(t *testing.T, ca *tlsx.CA, o tlsx.Issue) tls.Certificate {
	t.Helper()
	pair, err := ca.Issue(o)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	require.NoError(t, err)
	return cert
}

func grpcHealthy(ctx context.Context, addr string, cfg *tls.Config) error {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
	return err
}

func kafkaPing(ctx context.Context, addr string, cfg *tls.Config) error {
	kc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(cfg.Clone()), kgo.RequestRetries(0), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer kc.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return kc.Ping(cctx)
}

// tlsRoundTrip completes a handshake and waits briefly for the server's
// verdict: an alert (refused) or silence (accepted).
func tlsRoundTrip(addr string, cfg *tls.Config) error {
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		return nil // the server kept the connection: accepted
	}
	return err
}

func serverSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}
