package integration

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xscram "github.com/xdg-go/scram"

	"github.com/sluice-io/sluice/integration/cluster"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
)

// Users made with `sluice user create` authenticate on the Kafka listener
// (SASL over TLS) with franz-go and kcat using PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512, with sarama using PLAIN and SCRAM-SHA-512, and on gRPC with per-call passwords (the CLI and the SDK);
// a wrong password, no SASL at all, or a deleted user is refused.
func TestSASLUsers(t *testing.T) {
	kcat := kcatBinary(t)
	c := cluster.Start(t, cluster.Options{Combined: true, TLS: true,
		ExtraArgs: []string{"--kafka.sasl.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"}})
	files := c.TLS()
	node := c.Controllers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The CLI: as the admin (client certificate), or with a password only.
	run := func(stdin string, auth []string, args ...string) (string, error) {
		full := append([]string{"--bootstrap", strings.Join(c.Bootstrap(), ","), "--request-timeout", "10s", "--tls-ca", files.CA}, auth...)
		cmd := exec.CommandContext(ctx, cluster.CLI(t), append(full, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return out.String(), &cliError{err: err, stderr: errOut.String()}
		}
		return out.String(), nil
	}
	admin := []string{"--tls-cert", files.ClientCert, "--tls-key", files.ClientKey}
	_, err := run("alice-secret\n", admin, "user", "create", "alice")
	require.NoError(t, err)
	_, err = run("", admin, "topic", "create", "sasl", "--partitions", "1", "--replication-factor", "1")
	require.NoError(t, err)
	out, err := run("", admin, "user", "list")
	require.NoError(t, err)
	require.Contains(t, out, "alice  SCRAM-SHA-256  8192")
	require.Contains(t, out, "alice  SCRAM-SHA-512  8192")

	// gRPC per-call credentials: the right password lists topics; a wrong
	// one is refused with SASL_AUTHENTICATION_FAILED.
	out, err = run("", []string{"--user", "alice", "--password", "alice-secret"}, "topic", "list")
	require.NoError(t, err)
	require.Contains(t, out, "sasl")
	_, err = run("", []string{"--user", "alice", "--password", "wrong"}, "topic", "list")
	require.Error(t, err)
	require.Contains(t, err.Error(), "SASL_AUTHENTICATION_FAILED")
	caOnly, err := wire.ClientTLS(files.CA, "", "")
	require.NoError(t, err)
	sdk, err := client.New(client.Config{Bootstrap: c.Bootstrap(), TLS: caOnly.Clone(), User: "alice", Password: "alice-secret", RequestTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer sdk.Close()
	_, err = sdk.ListTopics(ctx, false)
	require.NoError(t, err)
	bad, err := client.New(client.Config{Bootstrap: c.Bootstrap(), TLS: caOnly.Clone(), User: "alice", Password: "nope", RequestTimeout: 3 * time.Second})
	require.NoError(t, err)
	defer bad.Close()
	_, err = bad.ListTopics(ctx, false)
	require.Equal(t, errs.SaslAuthenticationFailed, errs.CodeOf(err), "%v", err)

	// franz-go, one client per mechanism: produce with the right password.
	mechs := map[string]func(pw string) sasl.Mechanism{
		"PLAIN":         func(pw string) sasl.Mechanism { return plain.Auth{User: "alice", Pass: pw}.AsMechanism() },
		"SCRAM-SHA-256": func(pw string) sasl.Mechanism { return scram.Auth{User: "alice", Pass: pw}.AsSha256Mechanism() },
		"SCRAM-SHA-512": func(pw string) sasl.Mechanism { return scram.Auth{User: "alice", Pass: pw}.AsSha512Mechanism() },
	}
	kafkaClient := func(opts ...kgo.Opt) *kgo.Client {
		kc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(node.KafkaAddr), kgo.DialTLSConfig(caOnly.Clone()),
			kgo.RequestRetries(0), kgo.RetryTimeout(3 * time.Second)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(kc.Close)
		return kc
	}
	for name, mech := range mechs {
		kc := kafkaClient(kgo.SASL(mech("alice-secret")))
		require.NoError(t, kc.ProduceSync(ctx, &kgo.Record{Topic: "sasl", Value: []byte(name)}).FirstErr(), name)
		wrong := kafkaClient(kgo.SASL(mech("wrong")))
		err := wrong.Ping(ctx)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "SASL_AUTHENTICATION_FAILED", name)
	}
	// Without SASL the listener closes the connection at the first request
	// that is not ApiVersions.
	require.Error(t, kafkaClient().Ping(ctx))

	// kcat (librdkafka) reads the three records back with each mechanism,
	// and fails with a wrong password.
	kcatRun := func(mech, pw string, args ...string) (stdout, stderr string, err error) {
		kctx, kcancel := context.WithTimeout(ctx, kcatTimeout)
		defer kcancel()
		full := append([]string{"-b", node.KafkaAddr, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + files.CA,
			"-X", "sasl.mechanisms=" + mech, "-X", "sasl.username=alice", "-X", "sasl.password=" + pw}, args...)
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(kctx, kcat, full...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	for name := range mechs {
		out, stderr, err := kcatRun(name, "alice-secret", "-C", "-t", "sasl", "-o", "beginning", "-e", "-f", "%s\n")
		require.NoError(t, err, stderr)
		require.ElementsMatch(t, []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, strings.Fields(out), name)
		_, stderr, err = kcatRun(name, "wrong", "-L", "-m", "3")
		require.Error(t, err, name)
		require.Contains(t, stderr, "SASL authentication error", name)
	}

	// sarama (SaslHandshake v1 and SaslAuthenticate) with PLAIN and
	// SCRAM-SHA-512: a record produced and read back; a wrong password is
	// refused when the client connects.
	saramaCfg := func(mech sarama.SASLMechanism, pw string) *sarama.Config {
		cfg := saramaConfig(sarama.V3_6_0_0)
		cfg.Metadata.Retry.Max = 0
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, caOnly.Clone()
		cfg.Net.SASL.Enable, cfg.Net.SASL.Mechanism = true, mech
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "alice", pw
		if mech == sarama.SASLTypeSCRAMSHA512 {
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{hash: xscram.SHA512} }
		}
		return cfg
	}
	for _, mech := range []sarama.SASLMechanism{sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA512} {
		sc, err := sarama.NewClient([]string{node.KafkaAddr}, saramaCfg(mech, "alice-secret"))
		require.NoError(t, err, mech)
		p, err := sarama.NewSyncProducerFromClient(sc)
		require.NoError(t, err, mech)
		value := "sarama-" + string(mech)
		part, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: "sasl", Value: sarama.StringEncoder(value)})
		require.NoError(t, err, mech)
		consumer, err := sarama.NewConsumerFromClient(sc)
		require.NoError(t, err, mech)
		pc, err := consumer.ConsumePartition("sasl", part, off)
		require.NoError(t, err, mech)
		select {
		case m := <-pc.Messages():
			require.Equal(t, value, string(m.Value), mech)
		case err := <-pc.Errors():
			require.NoError(t, err, mech)
		case <-ctx.Done():
			require.FailNow(t, "no record read back", "%s", mech)
		}
		require.NoError(t, pc.Close())
		require.NoError(t, consumer.Close())
		require.NoError(t, p.Close()) // closes sc too
		_, err = sarama.NewClient([]string{node.KafkaAddr}, saramaCfg(mech, "wrong"))
		require.ErrorIs(t, err, sarama.ErrSASLAuthenticationFailed, mech)
	}

	// Kafka's AlterUserScramCredentials and DescribeUserScramCredentials
	// (kadm, as the admin's certificate): bob is created and then
	// authenticates with SCRAM-SHA-512.
	adminTLS, err := files.ClientTLS()
	require.NoError(t, err)
	adm := kadm.NewClient(kafkaClient(kgo.DialTLSConfig(adminTLS.Clone())))
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "bob-secret"}})
	require.NoError(t, err)
	require.NoError(t, altered.Error())
	_, err = adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha256, Iterations: 100, Password: "x"}})
	require.Error(t, err, "iterations below 4096 are refused")
	described, err := adm.DescribeUserSCRAMs(ctx)
	require.NoError(t, err)
	require.Equal(t, int32(4096), described["bob"].CredInfos[0].Iterations)
	require.Len(t, described["alice"].CredInfos, 2)
	bob := kafkaClient(kgo.SASL(scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism()))
	require.NoError(t, bob.Ping(ctx))

	// A deleted user is refused by the next connection.
	_, err = run("", admin, "user", "delete", "alice")
	require.NoError(t, err)
	require.Error(t, kafkaClient(kgo.SASL(mechs["SCRAM-SHA-256"]("alice-secret"))).Ping(ctx))
	_, err = run("", []string{"--user", "alice", "--password", "alice-secret"}, "topic", "list")
	require.Error(t, err)
}

// saramaSCRAM is sarama's SCRAM client on xdg-go/scram's client
// conversation.
type saramaSCRAM struct {
	hash xscram.HashGeneratorFcn
	conv *xscram.ClientConversation
}

func (s *saramaSCRAM) Begin(user, password, authzID string) error {
	c, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *saramaSCRAM) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *saramaSCRAM) Done() bool { return s.conv.Done() }
