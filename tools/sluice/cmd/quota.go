package cmd

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/quota"
)

func newQuotaCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Set, list and delete client quotas (byte rates and request share per user and client id, connection rate per IP)",
		Long: "Client quotas follow Kafka's model and config names. An entity is a user, a client id, both, or an IP; each\n" +
			"part is named or the default for its type (Kafka's <default>). Keys: producer_byte_rate and consumer_byte_rate\n" +
			"(bytes per second), request_percentage (percent of one request thread's time) for users and client ids;\n" +
			"connection_creation_rate (connections per second) for IPs. A client gets the quota of the most specific\n" +
			"entity that matches it: user+client-id, user+default client, user, default user+client-id, default user+default\n" +
			"client, default user, client-id, default client. Every process enforces a change within moments.\n\n" +
			"In these commands --user and --client-id name the quota's entity; to authenticate with a password, set\n" +
			"SLUICE_USER and SLUICE_PASSWORD instead of the global --user and --password.",
	}
	cmd.AddCommand(newQuotaSetCmd(g), newQuotaListCmd(g), newQuotaDeleteCmd(g))
	return cmd
}

// quotaEntityFlags are the entity flags shared by the quota commands.
type quotaEntityFlags struct {
	user, clientID, ip                      string
	userDefault, clientIDDefault, ipDefault bool
	cmd                                     *cobra.Command
}

func (f *quotaEntityFlags) register(cmd *cobra.Command, verb string) {
	f.cmd = cmd
	cmd.Flags().StringVar(&f.user, "user", "", "User name (the principal User:NAME) whose quotas to "+verb+".")
	cmd.Flags().BoolVar(&f.userDefault, "user-default", false, "The default user (every user without a quota of its own).")
	cmd.Flags().StringVar(&f.clientID, "client-id", "", "Client id whose quotas to "+verb+".")
	cmd.Flags().BoolVar(&f.clientIDDefault, "client-id-default", false, "The default client id (every client id without a quota of its own).")
	cmd.Flags().StringVar(&f.ip, "ip", "", "IP address whose connection_creation_rate to "+verb+".")
	cmd.Flags().BoolVar(&f.ipDefault, "ip-default", false, "The default IP (every IP without a quota of its own).")
}

// components returns the entity the flags name, in user, client-id, ip
// order; an empty result means no entity flag was given.
func (f *quotaEntityFlags) components() ([]quota.Component, error) {
	var out []quota.Component
	for _, t := range []struct {
		typ, name, flag string
		def             bool
	}{{quota.EntityUser, f.user, "user", f.userDefault}, {quota.EntityClientID, f.clientID, "client-id", f.clientIDDefault}, {quota.EntityIP, f.ip, "ip", f.ipDefault}} {
		named := f.cmd.Flags().Changed(t.flag)
		switch {
		case named && t.def:
			return nil, fmt.Errorf("give --%s or --%s-default, not both", t.flag, t.flag)
		case t.def:
			out = append(out, quota.Component{Type: t.typ, Default: true})
		case named:
			out = append(out, quota.Component{Type: t.typ, Name: t.name})
		}
	}
	return out, nil
}

// entity is components, required and valid as an entity.
func (f *quotaEntityFlags) entity() ([]quota.Component, error) {
	cs, err := f.components()
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, errors.New("name the entity: --user, --user-default, --client-id, --client-id-default (one user and one client id may be combined), --ip or --ip-default")
	}
	return cs, nil
}

// parseQuotaValues parses KEY=VALUE arguments.
func parseQuotaValues(args []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want KEY=VALUE, such as producer_byte_rate=1048576", a)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s is given twice", k)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: the value must be a number", k, v)
		}
		out[k] = f
	}
	return out, nil
}

// alterQuota sends one entity's ops and returns the entity's error.
func alterQuota(cmd *cobra.Command, g *globals, entity []quota.Component, ops []*controllerv1.ClientQuotaOp, validateOnly bool) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.AlterClientQuotas(cmd.Context(), &controllerv1.AlterClientQuotasRequest{
		Entries:      []*controllerv1.ClientQuotaAlteration{{Entity: quota.EntityToProto(entity), Ops: ops}},
		ValidateOnly: validateOnly,
	})
	if err != nil {
		return err
	}
	for _, r := range resp.GetResults() {
		if err := itemErr(r.GetError()); err != nil {
			return fmt.Errorf("%s: %w", quota.EntityKey(entity), err)
		}
	}
	return nil
}

func newQuotaSetCmd(g *globals) *cobra.Command {
	var ef quotaEntityFlags
	var validateOnly bool
	cmd := &cobra.Command{
		Use:   "set KEY=VALUE...",
		Short: "Set quota values of one entity (other values of the entity are kept)",
		Example: "  sluice quota set --client-id app1 producer_byte_rate=1048576\n" +
			"  sluice quota set --user alice --client-id-default consumer_byte_rate=5242880 request_percentage=50\n" +
			"  sluice quota set --user-default producer_byte_rate=10485760\n" +
			"  sluice quota set --ip 10.0.0.7 connection_creation_rate=20",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			entity, err := ef.entity()
			if err != nil {
				return err
			}
			vals, err := parseQuotaValues(args)
			if err != nil {
				return err
			}
			if err := (quota.Entry{Entity: entity, Values: vals}).Validate(); err != nil {
				return err
			}
			var ops []*controllerv1.ClientQuotaOp
			for _, k := range slices.Sorted(maps.Keys(vals)) {
				ops = append(ops, &controllerv1.ClientQuotaOp{Key: k, Value: vals[k]})
			}
			if err := alterQuota(cmd, g, entity, ops, validateOnly); err != nil {
				return err
			}
			e := quota.EntryToProto(quota.Entry{Entity: entity, Values: vals})
			return g.print(cmd.OutOrStdout(), e, func(w io.Writer) error {
				if validateOnly {
					fmt.Fprintln(w, "Valid (nothing changed):")
				} else {
					fmt.Fprintln(w, "Set:")
				}
				return printQuotas(w, []*controllerv1.ClientQuotaEntry{e})
			})
		},
	}
	ef.register(cmd, "set")
	cmd.Flags().BoolVar(&validateOnly, "validate-only", false, "Check the change on the controller without applying it.")
	return cmd
}

func newQuotaListCmd(g *globals) *cobra.Command {
	var ef quotaEntityFlags
	var strict bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List quotas, all or those of the entities the flags match",
		Long: "Without entity flags, every quota is listed. --user alice lists alice's quotas, also those combined with a\n" +
			"client id; --strict lists only entities made of exactly the flags given.",
		Example: "  sluice quota list\n  sluice quota list --client-id app1\n  sluice quota list --user alice --strict",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := ef.components()
			if err != nil {
				return err
			}
			f := quota.Filter{Strict: strict}
			for _, c := range cs {
				fc := quota.FilterComponent{Type: c.Type, Match: quota.MatchExact, Name: c.Name}
				if c.Default {
					fc.Match = quota.MatchDefault
				}
				f.Components = append(f.Components, fc)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.DescribeClientQuotas(cmd.Context(), quota.FilterToProto(f))
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				return printQuotas(w, resp.GetEntries())
			})
		},
	}
	ef.register(cmd, "list")
	cmd.Flags().BoolVar(&strict, "strict", false, "Only entities made of exactly the components given (--user alice leaves out alice with a client id).")
	return cmd
}

func newQuotaDeleteCmd(g *globals) *cobra.Command {
	var ef quotaEntityFlags
	cmd := &cobra.Command{
		Use:     "delete [KEY...]",
		Aliases: []string{"rm"},
		Short:   "Remove quota values of one entity: the keys named, or every one it has",
		Example: "  sluice quota delete --client-id app1 producer_byte_rate\n  sluice quota delete --user alice --client-id app1   # every value",
		RunE: func(cmd *cobra.Command, args []string) error {
			entity, err := ef.entity()
			if err != nil {
				return err
			}
			keys := slices.Clone(args)
			if len(keys) == 0 {
				c, err := g.client()
				if err != nil {
					return err
				}
				f := quota.Filter{Strict: true}
				for _, comp := range entity {
					fc := quota.FilterComponent{Type: comp.Type, Match: quota.MatchExact, Name: comp.Name}
					if comp.Default {
						fc.Match = quota.MatchDefault
					}
					f.Components = append(f.Components, fc)
				}
				resp, err := c.DescribeClientQuotas(cmd.Context(), quota.FilterToProto(f))
				c.Close()
				if err != nil {
					return err
				}
				for _, e := range resp.GetEntries() {
					keys = append(keys, slices.Sorted(maps.Keys(e.GetValues()))...)
				}
				if len(keys) == 0 {
					return fmt.Errorf("%s has no quotas to delete", quota.EntityKey(entity))
				}
			}
			ops := make([]*controllerv1.ClientQuotaOp, 0, len(keys))
			for _, k := range keys {
				ops = append(ops, &controllerv1.ClientQuotaOp{Key: k, Remove: true})
			}
			if err := alterQuota(cmd, g, entity, ops, false); err != nil {
				return err
			}
			res := &controllerv1.AlterClientQuotasResult{Entity: quota.EntityToProto(entity)}
			return g.print(cmd.OutOrStdout(), res, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Removed %s from %s\n", strings.Join(keys, ", "), quota.EntityKey(entity))
				return err
			})
		},
	}
	ef.register(cmd, "delete")
	return cmd
}

func printQuotas(w io.Writer, entries []*controllerv1.ClientQuotaEntry) error {
	fmt.Fprintln(w, "ENTITY\tKEY\tVALUE")
	for _, e := range entries {
		ent := quota.EntityKey(quota.EntityFromProto(e.GetEntity()))
		for _, k := range slices.Sorted(maps.Keys(e.GetValues())) {
			fmt.Fprintf(w, "%s\t%s\t%s\n", ent, k, strconv.FormatFloat(e.GetValues()[k], 'f', -1, 64))
		}
	}
	return nil
}
