package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-io/sluice/libs/devcluster"
)

type devOptions struct {
	controllers  int
	storageNodes int
	groupCoords  int
	txnCoords    int
	dataDir      string
	basePort     int
	sluiced      string
	fresh        bool
	autoRestart  bool
	tls          bool
	authz        bool
	extra        []string
}

func newDevCmd(_ *globals) *cobra.Command {
	o := &devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a multi-process cluster on this machine, in the foreground",
		Long: `Run a Sluice cluster on loopback: each controller and storage node is its own
sluiced process with its own data directory. Controllers form one etcd quorum.
Storage nodes also run replication and the group and transaction coordinators
(with --group-coordinators N or --transaction-coordinators N, those run as N
processes of their own instead).

Process k (controllers first) listens on base-port+10k (gRPC), +1 (HTTP
metrics), +4 (Kafka protocol), and controllers also on +2 and +3 (etcd). With
the default base port the first controller is at 127.0.0.1:9090, the default
--bootstrap of every sluice command, and Kafka clients can bootstrap from any
process's Kafka address.

With --tls every listener (gRPC, Kafka, etcd) and every connection between
processes uses TLS, with certificates from a throw-away CA under
<data-dir>/tls; the admin client certificate there maps to User:admin.
With --authz (which implies --tls) every process checks calls against the
cluster's ACLs (sluice acl), and User:admin is the super user.

The command writes <data-dir>/client.conf (bootstrap and, with --tls, the CA
and admin certificate); sluice commands run from the same directory read it
(or set SLUICE_CONFIG to its path).

Every log line is prefixed with its process name. Ctrl-C stops everything.
While it runs, type a command and Enter:
  status                       list processes
  kill|stop|pause|resume|restart NAME
                               SIGKILL, SIGTERM, SIGSTOP, SIGCONT, or restart a process`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), cmd.OutOrStdout(), cmd.InOrStdin(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.controllers, "controllers", 1, "Number of controller processes (1, 3 or 5 for a quorum).")
	f.IntVar(&o.storageNodes, "storage-nodes", 1, "Number of storage-node processes.")
	f.IntVar(&o.groupCoords, "group-coordinators", 0, "Number of group coordinators in processes of their own; with any, storage nodes run no group coordinator.")
	f.IntVar(&o.txnCoords, "transaction-coordinators", 0,
		"Number of transaction coordinators in processes of their own; with any, storage nodes run no transaction coordinator.")
	f.StringVar(&o.dataDir, "data-dir", "./data/dev", "Directory for every process's data and log.")
	f.IntVar(&o.basePort, "base-port", 9090, "First port; see above.")
	f.StringVar(&o.sluiced, "sluiced", "", "Path of the sluiced binary; default: next to this sluice binary, then $PATH.")
	f.BoolVar(&o.fresh, "fresh", false, "Delete the data directory first.")
	f.BoolVar(&o.autoRestart, "auto-restart", false, "Restart a process that exits by itself.")
	f.BoolVar(&o.tls, "tls", false, "Use TLS everywhere, with a throw-away CA under the data directory.")
	f.BoolVar(&o.authz, "authz", false, "Check every call against ACLs (sluice acl), with User:admin (the admin certificate) as super user; implies --tls.")
	f.StringArrayVar(&o.extra, "sluiced-arg", nil, "Extra flag for every sluiced process (repeatable).")
	return cmd
}

func findSluiced(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		cand := filepath.Join(filepath.Dir(self), "sluiced")
		if _, err := os.Stat(cand); err == nil {
			return cand, nil
		}
	}
	p, err := exec.LookPath("sluiced")
	if err != nil {
		return "", errors.New("cannot find the sluiced binary: build it with `make build` or pass --sluiced")
	}
	return p, nil
}

func runDev(ctx context.Context, out io.Writer, in io.Reader, o *devOptions) error {
	bin, err := findSluiced(o.sluiced)
	if err != nil {
		return err
	}
	if o.fresh {
		if err := os.RemoveAll(o.dataDir); err != nil {
			return fmt.Errorf("removing %s: %w", o.dataDir, err)
		}
	}
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	restarts := make(chan *devcluster.Process, 16)
	extra := o.extra
	if o.authz {
		o.tls = true
		extra = append([]string{"--authz.enabled", "--authz.super-users=User:admin"}, extra...)
	}
	spec := devcluster.Spec{
		Sluiced:                 bin,
		Dir:                     dir,
		Controllers:             o.controllers,
		StorageNodes:            o.storageNodes,
		GroupCoordinators:       o.groupCoords,
		TransactionCoordinators: o.txnCoords,
		BasePort:                o.basePort,
		ExtraArgs:               extra,
		TLS:                     o.tls,
		Output:                  out,
		OnExit: func(p *devcluster.Process, err error) {
			fmt.Fprintf(out, "*** %s (pid exited) stopped unexpectedly: %v; type `restart %s` to start it again\n", p.Name, err, p.Name)
			if o.autoRestart {
				restarts <- p
			}
		},
	}
	fmt.Fprintf(out, "starting %d controller(s) and %d storage node(s) in %s ...\n", o.controllers, o.storageNodes, dir)
	c, err := devcluster.Start(ctx, spec)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping every process ...")
		c.StopAll()
	}()
	printProcesses(out, c)
	// Every controller, so clients keep working while any one is down.
	var ctrl []string
	for _, p := range c.Controllers() {
		ctrl = append(ctrl, p.Addr)
	}
	conf := map[string]string{"bootstrap": strings.Join(ctrl, ",")}
	if t := c.TLS(); t != nil {
		conf["tls-ca"], conf["tls-cert"], conf["tls-key"] = t.CA, t.ClientCert, t.ClientKey
		fmt.Fprintf(out, "TLS: CA %s; admin (User:admin) certificate %s, key %s\n", t.CA, t.ClientCert, t.ClientKey)
	}
	confPath := filepath.Join(dir, "client.conf")
	if err := writeClientConfig(confPath, conf); err != nil {
		return err
	}
	fmt.Fprintf(out, "cluster ready: Ctrl-C stops it; for other shells:\n  export SLUICE_BOOTSTRAP=%s SLUICE_CONFIG=%s\n  sluice cluster describe\n", strings.Join(ctrl, ","), confPath)
	fmt.Fprintf(out, "Kafka clients: bootstrap.servers=%s\n", strings.Join(c.KafkaBootstrap(), ","))

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		// stdin closed (not a terminal, or EOF): keep running until Ctrl-C.
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-restarts:
			fmt.Fprintf(out, "*** restarting %s\n", p.Name)
			if err := p.Start(); err != nil {
				fmt.Fprintf(out, "*** %v\n", err)
			}
		case line := <-lines:
			devCommand(ctx, out, c, line)
		}
	}
}

func devCommand(ctx context.Context, out io.Writer, c *devcluster.Cluster, line string) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return
	}
	if fields[0] == "status" {
		printProcesses(out, c)
		return
	}
	if len(fields) != 2 {
		fmt.Fprintln(out, "*** usage: status | kill|stop|pause|resume|restart NAME")
		return
	}
	p := c.Process(fields[1])
	if p == nil {
		fmt.Fprintf(out, "*** no process named %q (type status)\n", fields[1])
		return
	}
	var err error
	switch fields[0] {
	case "kill":
		err = p.Kill()
	case "stop":
		err = p.Stop(devStopTimeout)
	case "pause":
		err = p.Pause()
	case "resume":
		err = p.Resume()
	case "restart":
		if err = p.Restart(); err == nil {
			err = p.WaitHealthy(ctx, devReadyTimeout)
		}
	default:
		err = fmt.Errorf("unknown command %q", fields[0])
	}
	if err != nil {
		fmt.Fprintf(out, "*** %v\n", err)
		return
	}
	fmt.Fprintf(out, "*** %s %s: done\n", fields[0], p.Name)
}

func printProcesses(out io.Writer, c *devcluster.Cluster) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNODE\tROLES\tPID\tSTATE\tGRPC\tKAFKA\tHTTP\tLOG")
	for _, p := range c.Processes() {
		state := "running"
		switch {
		case !p.Running():
			state = "exited"
		case p.Paused():
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.NodeID, p.Roles, p.PID(), state, p.Addr, p.KafkaAddr, p.HTTPAddr, p.LogPath)
	}
	_ = tw.Flush() // console output
}

const (
	devStopTimeout  = 10 * time.Second
	devReadyTimeout = 60 * time.Second
)
