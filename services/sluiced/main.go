// Command sluiced is the Sluice server. One binary runs any set of roles:
//
//	sluiced --roles=all --data-dir ./data --listen 127.0.0.1:9090
//	sluiced --roles=controller --node-id 1 ...
//	sluiced --roles=storage-node,replication --node-id 4 --controllers 127.0.0.1:9090 ...
//
// Run sluiced --help for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-io/sluice/services/sluiced/app"
)

func main() {
	var cfg app.Config
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sluiced: unexpected argument %q (flags only; see --help)\n", fs.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
		os.Exit(1)
	}
}
