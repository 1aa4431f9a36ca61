package check

import "fmt"

// validate checks the records Check cannot judge without: outcomes, kinds
// and protocols set, windows in order.
func validate(h History) error {
	for i, in := range h.Inits {
		if in.Outcome < OK || in.Outcome > Info {
			return fmt.Errorf("init %d (process %d): outcome not set", i, in.Process)
		}
		if in.TransactionalID == "" {
			return fmt.Errorf("init %d (process %d): no transactional id", i, in.Process)
		}
	}
	for i, g := range h.Generations {
		if g.Protocol != ProtocolClassic && g.Protocol != ProtocolConsumer {
			return fmt.Errorf("generation %d (process %d): protocol %q, want %q or %q", i, g.Process, g.Protocol,
				ProtocolClassic, ProtocolConsumer)
		}
		if g.Group == "" {
			return fmt.Errorf("generation %d (process %d): no group", i, g.Process)
		}
		if g.End != 0 && g.End < g.Start {
			return fmt.Errorf("generation %d (process %d): ends at %d before it starts at %d", i, g.Process, g.End,
				g.Start)
		}
	}
	for i, gc := range h.Commits {
		if gc.Kind != CommitAcked && gc.Kind != CommitFetched {
			return fmt.Errorf("group commit %d (process %d): kind %q, want %q or %q", i, gc.Process, gc.Kind,
				CommitAcked, CommitFetched)
		}
		if gc.Outcome < OK || gc.Outcome > Info {
			return fmt.Errorf("group commit %d (process %d): outcome not set", i, gc.Process)
		}
		if gc.Group == "" {
			return fmt.Errorf("group commit %d (process %d): no group", i, gc.Process)
		}
	}
	return nil
}
