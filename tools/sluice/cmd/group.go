package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	groupv1 "github.com/sluice-io/sluice/gen/go/sluice/group/v1"
	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
)

func newGroupCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "group",
		Aliases: []string{"groups"},
		Short:   "List, describe and delete consumer groups; reset and delete their committed offsets",
	}
	cmd.AddCommand(newGroupListCmd(g), newGroupDescribeCmd(g), newGroupDeleteCmd(g), newGroupResetOffsetsCmd(g), newGroupDeleteOffsetsCmd(g))
	return cmd
}

// groupStates are the group states ListGroups filters on, by lower-case
// name, so --state takes them in any case (as Kafka's tool does).
var groupStates = map[string]string{}

func init() {
	for _, s := range []string{"Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Dead", "Assigning", "Reconciling"} {
		groupStates[strings.ToLower(s)] = s
	}
}

// normalizeFilters checks --state and --type values and spells them as the
// server does.
func normalizeFilters(states, types []string) ([]string, []string, error) {
	var outS, outT []string
	for _, s := range states {
		name, ok := groupStates[strings.ToLower(strings.TrimSpace(s))]
		if !ok {
			return nil, nil, fmt.Errorf("--state %q: want one of Empty, Stable, PreparingRebalance, CompletingRebalance, Dead, Assigning, Reconciling", s)
		}
		outS = append(outS, name)
	}
	for _, t := range types {
		t = strings.ToLower(strings.TrimSpace(t))
		if t != "classic" && t != "consumer" {
			return nil, nil, fmt.Errorf("--type %q: want classic or consumer", t)
		}
		outT = append(outT, t)
	}
	return outS, outT, nil
}

func newGroupListCmd(g *globals) *cobra.Command {
	var states, types []string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups with their type and state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			states, types, err := normalizeFilters(states, types)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			groups, lerr := c.ListGroups(cmd.Context(), states, types)
			if lerr != nil && len(groups) == 0 {
				// Every node's error, each with its address.
				return errors.New(errText(lerr))
			}
			if err := g.print(cmd.OutOrStdout(), &groupv1.ListGroupsResponse{Groups: groups}, func(w io.Writer) error {
				fmt.Fprintln(w, "GROUP\tTYPE\tPROTOCOL-TYPE\tSTATE")
				for _, gr := range groups {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", gr.GetGroupId(), dash(gr.GetType()), dash(gr.GetProtocolType()), dash(gr.GetState()))
				}
				return nil
			}); err != nil {
				return err
			}
			if lerr != nil {
				return fmt.Errorf("some coordinators did not answer, so the list may be incomplete: %s", errText(lerr))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "Only groups in these states (Empty, Stable, PreparingRebalance, CompletingRebalance, Dead, Assigning, Reconciling); comma-separated or repeated.")
	cmd.Flags().StringSliceVar(&types, "type", nil, "Only groups of these types (classic, consumer); comma-separated or repeated.")
	return cmd
}

// groupMissing says whether a description means the group does not exist.
func groupMissing(d *groupv1.GroupDescription) bool {
	return d.GetError().GetCode() == errs.GroupIDNotFound || (d.GetError() == nil && d.GetState() == "Dead")
}

// lagJSON is a row of describe's JSON output, named in protojson's style
// as the rest of the CLI's JSON.
type lagJSON struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset int64  `json:"currentOffset"`
	LogEndOffset  int64  `json:"logEndOffset"`
	Lag           int64  `json:"lag"`
	MemberID      string `json:"memberId,omitempty"`
	ClientID      string `json:"clientId,omitempty"`
	Host          string `json:"host,omitempty"`
}

func newGroupDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe GROUP",
		Short: "Describe a group: state, protocol, members and their partitions, committed offsets, log end offsets and lag",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			descs, err := c.DescribeGroups(ctx, group)
			d := descs[0]
			if groupMissing(d) {
				return fmt.Errorf("consumer group '%s' does not exist", group)
			}
			if err != nil {
				return err
			}
			lag, lerr := c.GroupLag(ctx, group)
			if lerr != nil && lag == nil {
				return lerr
			}
			// Which node coordinates the group, as Kafka's describe --state
			// shows it: what an operator restarts when the group is stuck.
			// Not knowing it leaves the rest of the description useful.
			co := groupCoordinator{NodeID: -1}
			if id, addr, err := c.FindCoordinator(ctx, group); err == nil {
				co = groupCoordinator{NodeID: id, Address: addr}
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(d)
				if err != nil {
					return err
				}
				rows := make([]lagJSON, len(lag))
				for i, r := range lag {
					rows[i] = lagJSON{Topic: r.Topic, Partition: r.Partition, CurrentOffset: r.Committed, LogEndOffset: r.LogEnd,
						Lag: r.Lag, MemberID: r.MemberID, ClientID: r.ClientID, Host: r.Host}
				}
				if err := printJSON(out, struct {
					Group       json.RawMessage  `json:"group"`
					Coordinator groupCoordinator `json:"coordinator"`
					Offsets     []lagJSON        `json:"offsets"`
				}{b, co, rows}); err != nil {
					return err
				}
			} else if err := g.print(out, nil, func(w io.Writer) error {
				writeGroupDescription(w, d, co, lag)
				return nil
			}); err != nil {
				return err
			}
			if lerr != nil {
				return fmt.Errorf("some log end offsets are unknown: %s", errText(lerr))
			}
			return nil
		},
	}
}

// groupCoordinator is the node coordinating a group; NodeID -1 when it is
// not known.
type groupCoordinator struct {
	NodeID  int32  `json:"nodeId"`
	Address string `json:"address,omitempty"`
}

func (co groupCoordinator) String() string {
	if co.NodeID < 0 {
		return "unknown"
	}
	return fmt.Sprintf("node %d at %s", co.NodeID, co.Address)
}

// writeGroupDescription renders a group as describe shows it: a summary,
// the members with their partitions, then one row per partition, like
// kafka-consumer-groups --describe.
func writeGroupDescription(w io.Writer, d *groupv1.GroupDescription, co groupCoordinator, lag []client.PartitionLag) {
	protocol := d.GetProtocolType()
	if d.GetProtocol() != "" {
		protocol += "/" + d.GetProtocol()
	}
	fmt.Fprintf(w, "Group: %s  State: %s  Type: %s  Protocol: %s  Epoch: %d  Members: %d\n",
		d.GetGroupId(), dash(d.GetState()), dash(d.GetType()), dash(protocol), d.GetEpoch(), len(d.GetMembers()))
	fmt.Fprintf(w, "Coordinator: %s\n", co)
	fmt.Fprintln(w)
	if len(d.GetMembers()) == 0 {
		fmt.Fprintf(w, "Consumer group '%s' has no active members.\n", d.GetGroupId())
	} else {
		fmt.Fprintln(w, "MEMBER-ID\tINSTANCE-ID\tCLIENT-ID\tHOST\tEPOCH\tPARTITIONS")
		for _, m := range d.GetMembers() {
			// Member epochs belong to the consumer protocol; classic
			// members have the group's generation only.
			epoch := "-"
			if d.GetType() == "consumer" {
				epoch = fmt.Sprint(m.GetMemberEpoch())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", m.GetMemberId(), dash(m.GetGroupInstanceId()), dash(m.GetClientId()),
				dash(m.GetClientHost()), epoch, assignmentText(m.GetAssignment()))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID")
	for _, r := range lag {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, offsetText(r.Committed), offsetText(r.LogEnd),
			lagText(r), dash(r.MemberID), dash(r.Host), dash(r.ClientID))
	}
}

// assignmentText renders an assignment as "a:0,1 b:2", topics sorted.
func assignmentText(a *groupv1.Assignment) string {
	var parts []string
	for _, tp := range a.GetTopicPartitions() {
		ps := append([]int32(nil), tp.GetPartitions()...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		parts = append(parts, tp.GetTopic()+":"+ids(ps))
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func offsetText(o int64) string {
	if o < 0 {
		return "-"
	}
	return fmt.Sprint(o)
}

func lagText(r client.PartitionLag) string {
	if r.Committed < 0 || r.LogEnd < 0 {
		return "-"
	}
	return fmt.Sprint(r.Lag)
}

// errText renders every error joined in err, one after another (the CLI's
// error line shows only the first code otherwise).
func errText(err error) string {
	var list []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			list = append(list, errText(e))
		}
		return strings.Join(list, "; ")
	}
	return err.Error()
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func newGroupDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete groups and their committed offsets (only groups without active members)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			res, _ := c.DeleteGroups(cmd.Context(), args...) // each result carries its own error, reported below
			var failed []string
			if err := g.print(cmd.OutOrStdout(), &groupv1.DeleteGroupsResponse{Results: res}, func(w io.Writer) error {
				for _, r := range res {
					if r.GetError() == nil {
						fmt.Fprintf(w, "Deleted group %s.\n", r.GetGroupId())
					}
				}
				return nil
			}); err != nil {
				return err
			}
			for _, r := range res {
				if e := errs.FromProto(r.GetError()); e != nil {
					failed = append(failed, fmt.Sprintf("group '%s' could not be deleted: %s", r.GetGroupId(), e.Error()))
				}
			}
			switch len(failed) {
			case 0:
				return nil
			case 1:
				return errors.New(failed[0])
			}
			return fmt.Errorf("%d of %d groups could not be deleted:\n  %s", len(failed), len(res), strings.Join(failed, "\n  "))
		},
	}
}

// topicPartitions expands --topic values into partitions: those named, or
// every partition of the topic from metadata.
func topicPartitions(ctx context.Context, c *client.Client, specs []topicSpec) ([]client.TopicPartition, error) {
	var out []client.TopicPartition
	seen := map[client.TopicPartition]bool{}
	add := func(tp client.TopicPartition) {
		if !seen[tp] {
			seen[tp] = true
			out = append(out, tp)
		}
	}
	for _, s := range specs {
		if len(s.partitions) > 0 {
			for _, p := range s.partitions {
				add(client.TopicPartition{Topic: s.topic, Partition: p})
			}
			continue
		}
		md, err := c.Metadata(ctx, s.topic)
		if err != nil {
			return nil, fmt.Errorf("partitions of topic %q: %w", s.topic, err)
		}
		if len(md.GetTopics()) == 0 {
			return nil, fmt.Errorf("metadata came back without topic %q", s.topic)
		}
		ti := md.GetTopics()[0]
		if e := errs.FromProto(ti.GetError()); e != nil {
			return nil, e
		}
		for _, p := range ti.GetPartitions() {
			add(client.TopicPartition{Topic: s.topic, Partition: p.GetPartition()})
		}
	}
	return out, nil
}

func newGroupResetOffsetsCmd(g *globals) *cobra.Command {
	var f resetFlags
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP",
		Short: "Plan or commit new offsets for a group without active members (a dry run unless --execute)",
		Long: `Compute new committed offsets for a group's partitions and print the plan;
with --execute, commit them. The group must have no active members (state
Empty, or not existing yet), as with kafka-consumer-groups --reset-offsets.

  sluice group reset-offsets orders-app --topic orders --to-earliest
  sluice group reset-offsets orders-app --topic orders:0,1 --shift-by -100 --execute
  sluice group reset-offsets orders-app --all-topics --to-datetime 2026-11-30T12:00:00Z --execute`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.shiftBySet = cmd.Flags().Changed("shift-by")
			f.toOffsetSet = cmd.Flags().Changed("to-offset")
			spec, topics, err := f.validate()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			rows, err := resetOffsets(cmd.Context(), c, args[0], spec, topics, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				return printJSON(out, struct {
					Group      string     `json:"group"`
					Executed   bool       `json:"executed"`
					Partitions []resetRow `json:"partitions"`
				}{args[0], f.execute, rows})
			}
			if err := g.print(out, nil, func(w io.Writer) error {
				fmt.Fprintln(w, "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tNEW-OFFSET")
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\n", args[0], r.Topic, r.Partition, offsetText(r.Current), r.New)
				}
				return nil
			}); err != nil {
				return err
			}
			if !f.execute {
				fmt.Fprintln(cmd.ErrOrStderr(), "Dry run: nothing was committed; add --execute to commit these offsets.")
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.topics, "topic", nil, "Topic to reset, all its partitions or only those listed (TOPIC or TOPIC:0,1,2); repeatable.")
	fl.BoolVar(&f.allTopics, "all-topics", false, "Reset every partition the group has committed offsets for.")
	fl.BoolVar(&f.toEarliest, "to-earliest", false, "Reset to the earliest offset.")
	fl.BoolVar(&f.toLatest, "to-latest", false, "Reset to the latest offset (the log end).")
	fl.StringVar(&f.toDatetime, "to-datetime", "", "Reset to the first offset whose timestamp is at or after this time (2006-01-02T15:04:05Z; without a zone, local time).")
	fl.Int64Var(&f.shiftBy, "shift-by", 0, "Move the committed offset by N (negative moves back), kept within the log.")
	fl.Int64Var(&f.toOffset, "to-offset", 0, "Reset to this offset, kept within the log.")
	fl.BoolVar(&f.execute, "execute", false, "Commit the new offsets (without it, only the plan is shown).")
	fl.BoolVar(&f.dryRun, "dry-run", false, "Only show the plan (the default).")
	return cmd
}

// resetOffsets plans a reset and, with --execute, commits it. It refuses a
// group with active members before looking anything else up.
func resetOffsets(ctx context.Context, c *client.Client, group string, spec resetSpec, topics []topicSpec, f resetFlags) ([]resetRow, error) {
	descs, err := c.DescribeGroups(ctx, group)
	d := descs[0]
	if err != nil && !groupMissing(d) {
		return nil, err
	}
	if err := resetAllowed(group, d.GetState()); err != nil {
		return nil, err
	}
	var tps []client.TopicPartition
	if f.allTopics {
		committed, err := c.FetchOffsets(ctx, group)
		if err != nil {
			return nil, err
		}
		for tp, p := range committed {
			if p.GetOffset() >= 0 {
				tps = append(tps, tp)
			}
		}
		if len(tps) == 0 {
			return nil, fmt.Errorf("group '%s' has no committed offsets; name the topics with --topic", group)
		}
	} else if tps, err = topicPartitions(ctx, c, topics); err != nil {
		return nil, err
	}
	fetched, err := c.FetchOffsets(ctx, group, tps...)
	if err != nil {
		return nil, err
	}
	in := resetInputs{committed: map[client.TopicPartition]int64{}}
	for tp, p := range fetched {
		in.committed[tp] = p.GetOffset()
	}
	if in.earliest, err = c.ListOffsets(ctx, client.OffsetEarliest, 0, tps...); err != nil {
		return nil, err
	}
	if in.latest, err = c.ListOffsets(ctx, client.OffsetLatest, 0, tps...); err != nil {
		return nil, err
	}
	if spec.mode == resetToDatetime {
		if in.byTime, err = c.ListOffsets(ctx, client.OffsetTimestamp, spec.at.UnixMilli(), tps...); err != nil {
			return nil, err
		}
	}
	rows, err := planReset(spec, tps, in)
	if err != nil || !f.execute {
		return rows, err
	}
	offsets := make(map[client.TopicPartition]int64, len(rows))
	for _, r := range rows {
		offsets[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.New
	}
	if err := c.CommitOffsets(ctx, group, offsets); err != nil {
		return nil, fmt.Errorf("committing the new offsets of group '%s': %w", group, err)
	}
	return rows, nil
}

func newGroupDeleteOffsetsCmd(g *globals) *cobra.Command {
	var topicFlags []string
	cmd := &cobra.Command{
		Use:   "delete-offsets GROUP --topic TOPIC[:P,P]",
		Short: "Delete a group's committed offsets for topics it no longer consumes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(topicFlags) == 0 {
				return errors.New("say whose offsets to delete: --topic TOPIC[:P,P] (repeatable)")
			}
			var specs []topicSpec
			for _, s := range topicFlags {
				ts, err := parseTopicSpec(s)
				if err != nil {
					return err
				}
				specs = append(specs, ts)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			tps, err := topicPartitions(ctx, c, specs)
			if err != nil {
				return err
			}
			if err := c.DeleteOffsets(ctx, args[0], tps...); err != nil {
				return err
			}
			sort.Slice(tps, func(i, j int) bool {
				if tps[i].Topic != tps[j].Topic {
					return tps[i].Topic < tps[j].Topic
				}
				return tps[i].Partition < tps[j].Partition
			})
			out := cmd.OutOrStdout()
			if g.output == "json" {
				type partJSON struct {
					Topic     string `json:"topic"`
					Partition int32  `json:"partition"`
				}
				parts := make([]partJSON, len(tps))
				for i, tp := range tps {
					parts[i] = partJSON{tp.Topic, tp.Partition}
				}
				return printJSON(out, struct {
					Group      string     `json:"group"`
					Partitions []partJSON `json:"partitions"`
				}{args[0], parts})
			}
			return g.print(out, nil, func(w io.Writer) error {
				fmt.Fprintln(w, "TOPIC\tPARTITION\tSTATUS")
				for _, tp := range tps {
					fmt.Fprintf(w, "%s\t%d\tDeleted\n", tp.Topic, tp.Partition)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringArrayVar(&topicFlags, "topic", nil, "Topic whose offsets to delete, all partitions or only those listed (TOPIC or TOPIC:0,1,2); repeatable.")
	return cmd
}
