package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/client/scramcred"
)

func newUserCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Create, list and delete users (SCRAM credentials for SASL and gRPC passwords)"}
	cmd.AddCommand(newUserCreateCmd(g), newUserDeleteCmd(g), newUserListCmd(g))
	return cmd
}

// parseMechanisms reads --mechanism values (SCRAM-SHA-256, SCRAM-SHA-512).
func parseMechanisms(names []string) ([]controllerv1.ScramMechanism, error) {
	var out []controllerv1.ScramMechanism
	for _, n := range names {
		m, ok := scramcred.Parse(n)
		if !ok {
			return nil, fmt.Errorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", n)
		}
		out = append(out, m)
	}
	return out, nil
}

// readNewPassword returns the password of the user being created: from
// --user-password, else a prompt (twice) on a terminal, else the first line
// of stdin.
func readNewPassword(cmd *cobra.Command, flagVal string) (string, error) {
	if cmd.Flags().Changed("user-password") {
		return flagVal, nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), "New password: ")
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", err
		}
		fmt.Fprint(cmd.ErrOrStderr(), "Repeat it: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", err
		}
		if string(a) != string(b) {
			return "", errors.New("the passwords differ")
		}
		return string(a), nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the password from stdin: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func newUserCreateCmd(g *globals) *cobra.Command {
	var mechanisms []string
	var iterations int
	var password string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a user or change its password",
		Long: "Create a user, or replace its credentials, for the given SCRAM mechanisms. The password comes from\n" +
			"--user-password, a prompt on a terminal, or the first line of stdin. Only a salt, the iteration count\n" +
			"and the salted password are sent to the cluster; the password itself never leaves this process.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mechs, err := parseMechanisms(mechanisms)
			if err != nil {
				return err
			}
			pw, err := readNewPassword(cmd, password)
			if err != nil {
				return err
			}
			if pw == "" {
				return errors.New("the password is empty")
			}
			req := &controllerv1.AlterUserScramCredentialsRequest{}
			for _, m := range mechs {
				up, err := scramcred.NewUpsertion(args[0], m, pw, iterations)
				if err != nil {
					return err
				}
				req.Upsertions = append(req.Upsertions, up)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.AlterUserScramCredentials(cmd.Context(), req)
			if err != nil {
				return err
			}
			for _, r := range resp.GetResults() {
				if err := itemErr(r.GetError()); err != nil {
					return fmt.Errorf("user %s: %w", r.GetUser(), err)
				}
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintf(w, "User %s has credentials for %s.\n", args[0], strings.Join(mechanisms, ", "))
				return nil
			})
		},
	}
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}, "SCRAM mechanisms to set, comma-separated or repeated.")
	cmd.Flags().IntVar(&iterations, "iterations", scramcred.DefaultIterations, fmt.Sprintf("PBKDF2 iterations (%d..%d).", scramcred.MinIterations, scramcred.MaxIterations))
	cmd.Flags().StringVar(&password, "user-password", "", "The new user's password (visible to other local users in the process list; prefer the prompt or stdin).")
	return cmd
}

func newUserDeleteCmd(g *globals) *cobra.Command {
	var mechanisms []string
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a user's credentials (every mechanism unless --mechanism names some)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			mechs, err := parseMechanisms(mechanisms)
			if err != nil {
				return err
			}
			if len(mechs) == 0 {
				desc, err := c.DescribeUserScramCredentials(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				r := desc.GetResults()[0]
				if err := itemErr(r.GetError()); err != nil {
					return fmt.Errorf("user %s: %w", args[0], err)
				}
				for _, ci := range r.GetCredentials() {
					mechs = append(mechs, ci.GetMechanism())
				}
			}
			req := &controllerv1.AlterUserScramCredentialsRequest{}
			for _, m := range mechs {
				req.Deletions = append(req.Deletions, &controllerv1.ScramCredentialDeletion{User: args[0], Mechanism: m})
			}
			resp, err := c.AlterUserScramCredentials(cmd.Context(), req)
			if err != nil {
				return err
			}
			for _, r := range resp.GetResults() {
				if err := itemErr(r.GetError()); err != nil {
					return fmt.Errorf("user %s: %w", r.GetUser(), err)
				}
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintf(w, "Deleted %d credential(s) of user %s.\n", len(mechs), args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", nil, "SCRAM mechanisms to delete (default: all the user has).")
	return cmd
}

func newUserListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list [NAME...]",
		Short: "List users with their SCRAM mechanisms and iteration counts",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.DescribeUserScramCredentials(cmd.Context(), args...)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintln(w, "USER\tMECHANISM\tITERATIONS")
				for _, r := range resp.GetResults() {
					if e := r.GetError(); e != nil {
						fmt.Fprintf(w, "%s\t-\t%s\n", r.GetUser(), e.GetMessage())
						continue
					}
					for _, ci := range r.GetCredentials() {
						fmt.Fprintf(w, "%s\t%s\t%d\n", r.GetUser(), scramcred.Name(ci.GetMechanism()), ci.GetIterations())
					}
				}
				return nil
			})
		},
	}
}
