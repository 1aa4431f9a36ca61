package cmd

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	"github.com/sluice-io/sluice/libs/authz"
)

func newACLCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Create, list and delete ACLs (who may do what on which topic, group, transactional id or the cluster)",
		Long: "ACLs follow Kafka's model and kafka-acls' flags. They are stored by the controller and enforced by every\n" +
			"process started with --authz.enabled, on gRPC and Kafka calls alike; a change applies to the next request\n" +
			"of every connection. Deny wins over Allow; Read, Write, Delete and Alter imply Describe; AlterConfigs\n" +
			"implies DescribeConfigs.",
	}
	cmd.AddCommand(newACLCreateCmd(g), newACLListCmd(g), newACLDeleteCmd(g))
	return cmd
}

// aclResources are the resource flags shared by the acl commands.
type aclResources struct {
	topics, groups, txnIDs []string
	cluster                bool
	patternType            string
}

func (r *aclResources) register(cmd *cobra.Command, patternHelp string) {
	cmd.Flags().StringArrayVar(&r.topics, "topic", nil, "Topic name (or prefix, or \"*\" for every topic); repeatable.")
	cmd.Flags().StringArrayVar(&r.groups, "group", nil, "Consumer group id (or prefix, or \"*\"); repeatable.")
	cmd.Flags().StringArrayVar(&r.txnIDs, "transactional-id", nil, "Transactional id (or prefix, or \"*\"); repeatable.")
	cmd.Flags().BoolVar(&r.cluster, "cluster", false, "The cluster resource (cluster-wide operations: Create, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite).")
	cmd.Flags().StringVar(&r.patternType, "resource-pattern-type", "literal", patternHelp)
}

type aclResource struct {
	rt   authz.ResourceType
	name string
}

func (r *aclResources) list() []aclResource {
	var out []aclResource
	for _, n := range r.topics {
		out = append(out, aclResource{authz.Topic, n})
	}
	for _, n := range r.groups {
		out = append(out, aclResource{authz.Group, n})
	}
	for _, n := range r.txnIDs {
		out = append(out, aclResource{authz.TransactionalID, n})
	}
	if r.cluster {
		out = append(out, aclResource{authz.Cluster, authz.ClusterName})
	}
	return out
}

// pattern parses --resource-pattern-type; "any" (filters only) is
// PatternUnknown.
func (r *aclResources) pattern(allowAny bool) (authz.PatternType, error) {
	if allowAny && strings.EqualFold(r.patternType, "any") {
		return authz.PatternUnknown, nil
	}
	pt, err := authz.ParsePatternType(r.patternType)
	if err != nil {
		if allowAny {
			return 0, fmt.Errorf("--resource-pattern-type %q: want any, literal or prefixed", r.patternType)
		}
		return 0, fmt.Errorf("--resource-pattern-type: %w", err)
	}
	return pt, nil
}

func parseOperations(names []string) ([]authz.Operation, error) {
	var out []authz.Operation
	for _, n := range names {
		for _, part := range strings.Split(n, ",") {
			op, err := authz.ParseOperation(strings.TrimSpace(part))
			if err != nil {
				return nil, fmt.Errorf("--operation: %w", err)
			}
			out = append(out, op)
		}
	}
	return out, nil
}

func newACLCreateCmd(g *globals) *cobra.Command {
	var res aclResources
	var allow, deny, hosts, ops []string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create ACLs: every combination of principal, host, operation and resource given",
		Example: "  sluice acl create --allow-principal User:alice --operation Write --operation Describe --topic orders\n" +
			"  sluice acl create --allow-principal User:etl --operation Read --topic logs- --resource-pattern-type prefixed --group etl\n" +
			"  sluice acl create --deny-principal User:* --host 10.0.0.9 --operation All --topic '*'",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(allow)+len(deny) == 0 {
				return errors.New("name at least one principal with --allow-principal or --deny-principal (such as User:alice, or User:* for everyone)")
			}
			if len(ops) == 0 {
				return errors.New("name at least one --operation (such as Read, Write, Describe or All)")
			}
			resources := res.list()
			if len(resources) == 0 {
				return errors.New("name at least one resource: --topic, --group, --transactional-id or --cluster")
			}
			pt, err := res.pattern(false)
			if err != nil {
				return err
			}
			operations, err := parseOperations(ops)
			if err != nil {
				return err
			}
			if len(hosts) == 0 {
				hosts = []string{authz.Wildcard}
			}
			var acls []authz.ACL
			for _, perm := range []struct {
				p          authz.Permission
				principals []string
			}{{authz.Allow, allow}, {authz.Deny, deny}} {
				for _, principal := range perm.principals {
					for _, host := range hosts {
						for _, op := range operations {
							for _, r := range resources {
								a := authz.ACL{Principal: principal, Host: host, Operation: op, Permission: perm.p, ResourceType: r.rt, Name: r.name, Pattern: pt}
								if r.rt == authz.Cluster {
									a.Pattern = authz.Literal
								}
								if field, problem := a.Validate(); field != "" {
									return fmt.Errorf("%s: %s", a, problem)
								}
								acls = append(acls, a)
							}
						}
					}
				}
			}
			bindings := make([]*controllerv1.AclBinding, len(acls))
			for i, a := range acls {
				bindings[i] = authz.ToProto(a)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.CreateAcls(cmd.Context(), bindings...)
			if err != nil {
				return err
			}
			var failed []error
			for i, e := range resp.GetErrors() {
				if err := itemErr(e); err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", acls[i], err))
				}
			}
			if err := errors.Join(failed...); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), &controllerv1.DescribeAclsResponse{Bindings: bindings}, func(w io.Writer) error {
				fmt.Fprintf(w, "Created %d ACL(s):\n", len(acls))
				return printACLs(w, bindings)
			})
		},
	}
	cmd.Flags().StringArrayVar(&allow, "allow-principal", nil, "Principal to allow (User:alice, or User:* for everyone); repeatable.")
	cmd.Flags().StringArrayVar(&deny, "deny-principal", nil, "Principal to deny; a Deny wins over every Allow. Repeatable.")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "IP address the principal connects from (default \"*\", any host); repeatable.")
	cmd.Flags().StringArrayVar(&ops, "operation", nil, "Operation: All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite; repeatable or comma-separated.")
	res.register(cmd, "How resource names match: literal (the exact name, or \"*\" for all) or prefixed (every name starting with it).")
	return cmd
}

// aclFilterFlags are the filters of list and delete.
type aclFilterFlags struct {
	res             aclResources
	principal, host string
	allow, deny     string
	ops             []string
}

func (f *aclFilterFlags) register(cmd *cobra.Command) {
	f.res.register(cmd, "Which ACLs of the named resources: any, literal or prefixed.")
	cmd.Flag("resource-pattern-type").DefValue = "any"
	f.res.patternType = "any"
	cmd.Flags().StringVar(&f.principal, "principal", "", "Only ACLs of this principal (User:alice).")
	cmd.Flags().StringVar(&f.allow, "allow-principal", "", "Only Allow ACLs of this principal.")
	cmd.Flags().StringVar(&f.deny, "deny-principal", "", "Only Deny ACLs of this principal.")
	cmd.Flags().StringVar(&f.host, "host", "", "Only ACLs for this host (an IP address, or \"*\").")
	cmd.Flags().StringArrayVar(&f.ops, "operation", nil, "Only ACLs of this operation; repeatable.")
}

// filters builds one filter per resource and operation named (a resource
// or operation left out matches any).
func (f *aclFilterFlags) filters() ([]*controllerv1.AclBinding, error) {
	pt, err := f.res.pattern(true)
	if err != nil {
		return nil, err
	}
	ops, err := parseOperations(f.ops)
	if err != nil {
		return nil, err
	}
	set := 0
	base := authz.Filter{Principal: f.principal, Host: f.host, Pattern: pt}
	for _, p := range []struct {
		v    string
		perm authz.Permission
	}{{f.principal, authz.PermissionUnknown}, {f.allow, authz.Allow}, {f.deny, authz.Deny}} {
		if p.v != "" {
			set++
			base.Principal, base.Permission = p.v, p.perm
		}
	}
	if set > 1 {
		return nil, errors.New("give only one of --principal, --allow-principal and --deny-principal")
	}
	resources := f.res.list()
	if len(resources) == 0 {
		resources = []aclResource{{}}
	}
	if len(ops) == 0 {
		ops = []authz.Operation{authz.OpUnknown}
	}
	var out []*controllerv1.AclBinding
	for _, r := range resources {
		for _, op := range ops {
			fl := base
			fl.ResourceType, fl.Name, fl.Operation = r.rt, r.name, op
			if r.rt == authz.Cluster {
				fl.Pattern = authz.PatternUnknown
			}
			out = append(out, authz.ToProto(authz.ACL(fl)))
		}
	}
	return out, nil
}

func newACLListCmd(g *globals) *cobra.Command {
	var f aclFilterFlags
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List ACLs, all or those matching the filters",
		Example: "  sluice acl list\n  sluice acl list --topic orders\n  sluice acl list --principal User:alice",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filters, err := f.filters()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			all := &controllerv1.DescribeAclsResponse{}
			seen := map[string]bool{}
			for _, fl := range filters {
				resp, err := c.DescribeAcls(cmd.Context(), fl)
				if err != nil {
					return err
				}
				for _, b := range resp.GetBindings() {
					if k := authz.FromProto(b).String(); !seen[k] {
						seen[k] = true
						all.Bindings = append(all.Bindings, b)
					}
				}
			}
			return g.print(cmd.OutOrStdout(), all, func(w io.Writer) error {
				return printACLs(w, all.GetBindings())
			})
		},
	}
	f.register(cmd)
	return cmd
}

func newACLDeleteCmd(g *globals) *cobra.Command {
	var f aclFilterFlags
	var all bool
	cmd := &cobra.Command{
		Use:     "delete",
		Aliases: []string{"rm"},
		Short:   "Delete the ACLs matching the filters",
		Example: "  sluice acl delete --allow-principal User:alice --topic orders --operation Write\n" +
			"  sluice acl delete --principal User:alice          # every ACL of alice\n  sluice acl delete --all",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filters, err := f.filters()
			if err != nil {
				return err
			}
			empty := len(filters) == 1 && authz.FilterFromProto(filters[0]).IsEmpty()
			if empty && !all {
				return errors.New("no filter given: name a principal, resource, operation or host, or pass --all to delete every ACL")
			}
			if all && !empty {
				return errors.New("--all deletes every ACL; leave out the filters, or leave out --all")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.DeleteAcls(cmd.Context(), filters...)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), resp, func(w io.Writer) error {
				fmt.Fprintf(w, "Deleted %d ACL(s):\n", len(resp.GetDeleted()))
				return printACLs(w, resp.GetDeleted())
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "Delete every ACL of the cluster.")
	return cmd
}

func printACLs(w io.Writer, bindings []*controllerv1.AclBinding) error {
	fmt.Fprintln(w, "PRINCIPAL\tHOST\tPERMISSION\tOPERATION\tRESOURCE\tNAME\tPATTERN")
	for _, b := range bindings {
		a := authz.FromProto(b)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Principal, a.Host, a.Permission, a.Operation, a.ResourceType, a.Name, a.Pattern)
	}
	return nil
}
