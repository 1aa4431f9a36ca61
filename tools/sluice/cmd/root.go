// Package cmd holds the sluice CLI's commands.
package cmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/client/wire"
	"github.com/sluice-io/sluice/libs/telemetry"
)

// globals are the flags every command shares, and the command's tracing.
type globals struct {
	bootstrap string
	output    string
	// timeout bounds each call to the cluster, retries included.
	timeout time.Duration
	// tlsCA, tlsCert and tlsKey are PEM files: the CA that signed the
	// servers' certificates, and a client certificate and key.
	tlsCA, tlsCert, tlsKey string
	// user and password authenticate every call (over TLS only).
	user, password string
	// clientID names this client to the cluster's quotas.
	clientID string
	tracing  tracing
}

// Execute runs the CLI and returns the process exit code.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, g := newRoot()
	err := root.ExecuteContext(ctx)
	g.tracing.end(err)
	var exit *exitError
	if errors.As(err, &exit) {
		if exit.err != nil {
			// The command's own words, with the context it wrapped around
			// the cluster's answer.
			msg := exit.err.Error()
			if errs.CodeOf(exit.err) == errs.NodeUnreachable {
				msg += unreachableHint(msg)
			}
			fmt.Fprintf(os.Stderr, "sluice: %s\n", msg)
		}
		return exit.code
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice: %s\n", describeErr(err))
		return 1
	}
	return 0
}

func newRoot() (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Command-line client for Sluice, a distributed event-streaming platform",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyClientConfig(cmd); err != nil {
				return err
			}
			if g.output != "text" && g.output != "json" {
				return fmt.Errorf("--output must be text or json, got %q", g.output)
			}
			ctx, err := g.tracing.start(cmd)
			cmd.SetContext(ctx)
			return err
		},
	}
	def := os.Getenv("SLUICE_BOOTSTRAP")
	if def == "" {
		def = "127.0.0.1:9090"
	}
	root.PersistentFlags().StringVar(&g.bootstrap, "bootstrap", def,
		"Comma-separated host:port of any Sluice nodes (env SLUICE_BOOTSTRAP).")
	root.PersistentFlags().DurationVar(&g.timeout, "request-timeout", 30*time.Second,
		"How long a call to the cluster may take, retries included (default.api.timeout.ms); when it ends, the last error the cluster answered with is shown.")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "text", "Output format: text or json.")
	root.PersistentFlags().StringVar(&g.tlsCA, "tls-ca", "", "PEM file of the CA that signed the cluster's certificates; connects over TLS.")
	root.PersistentFlags().StringVar(&g.tlsCert, "tls-cert", "", "PEM file of a client certificate for mutual TLS (with --tls-key).")
	root.PersistentFlags().StringVar(&g.tlsKey, "tls-key", "", "PEM file of the key of --tls-cert.")
	root.PersistentFlags().StringVar(&g.user, "user", os.Getenv("SLUICE_USER"), "User to authenticate as with a password, over TLS only (env SLUICE_USER).")
	root.PersistentFlags().StringVar(&g.password, "password", "", "Password of --user (env SLUICE_PASSWORD, which other local users cannot see in the process list).")
	root.PersistentFlags().StringVar(&g.clientID, "client-id", client.DefaultClientID,
		"Client id sent with every call (Kafka's client.id); client quotas match it.")
	root.AddCommand(newClusterCmd(g), newTopicCmd(g), newPartitionCmd(g), newProduceCmd(g), newConsumeCmd(g), newGroupCmd(g), newTxnCmd(g), newProducersCmd(g), newDevCmd(g), newCertsCmd(), newUserCmd(g), newACLCmd(g), newQuotaCmd(g), newPerfCmd(g), newVerifyCmd(g), newHealthCmd(g))
	return root, g
}

// client builds an SDK client from the global flags.
func (g *globals) client() (*client.Client, error) {
	var addrs []string
	for _, a := range strings.Split(g.bootstrap, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	var tel *client.Telemetry
	if g.tracing.tel != nil {
		tel = g.tracing.tel.Client(telemetry.Process)
	}
	// Retry warnings (no node answering yet) go to stderr, so a command
	// waiting on a cluster that is down says so instead of waiting silently.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tlsCfg, err := g.clientTLS()
	if err != nil {
		return nil, err
	}
	pw := g.password
	if pw == "" {
		pw = os.Getenv("SLUICE_PASSWORD")
	}
	if g.user != "" && tlsCfg == nil {
		return nil, errors.New("--user sends a password, which goes only over TLS: pass --tls-ca with the cluster's CA")
	}
	return client.New(client.Config{Bootstrap: addrs, RequestTimeout: g.timeout, Telemetry: tel, Logger: logger, TLS: tlsCfg,
		User: g.user, Password: pw, ClientID: g.clientID})
}

// clientTLS is the TLS configuration the --tls-* flags ask for, nil for
// plaintext.
func (g *globals) clientTLS() (*tls.Config, error) {
	if g.tlsCA == "" && g.tlsCert == "" && g.tlsKey == "" {
		return nil, nil
	}
	return wire.ClientTLS(g.tlsCA, g.tlsCert, g.tlsKey)
}

// print writes msg as JSON (--output json) or through text.
func (g *globals) print(w io.Writer, msg proto.Message, text func(io.Writer) error) error {
	if g.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(msg)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if err := text(tw); err != nil {
		return err
	}
	return tw.Flush()
}

// describeErr renders an error for a person: the Sluice error code and
// message, and what to do when no node could be reached.
func describeErr(err error) string {
	e := errs.From(err)
	msg := e.Error()
	if _, isStatus := status.FromError(err); !isStatus && !errors.As(err, new(*errs.Error)) {
		msg = err.Error() // keep the context the SDK wrapped around it
	}
	if e.Code == errs.NodeUnreachable {
		msg += unreachableHint(msg)
	}
	return msg
}

// unreachableHint says what to do when no node answered: start a cluster,
// or, when the node closed a plaintext connection or answered it with TLS,
// connect with TLS.
func unreachableHint(msg string) string {
	switch {
	case strings.Contains(msg, "error reading server preface: EOF"),
		strings.Contains(msg, "connection reset by peer"),
		strings.Contains(msg, "http2: frame too large"):
		return " (the node closed the connection: it may serve TLS only; pass --tls-ca with the cluster's CA, or set SLUICE_CONFIG to the file `sluice dev` wrote)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return " (the node does not serve TLS: drop --tls-ca, --tls-cert and --tls-key)"
	default:
		return " (is a cluster running? start one with `make run` or `sluice dev`)"
	}
}
