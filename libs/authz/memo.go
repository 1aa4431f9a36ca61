package authz

import "context"

// Memo checks one operation on resources of one type for the items of one
// request, once per resource name: a produce of 100 partitions of one
// topic costs one check, and a refusal is audited once. Consecutive items
// of one name (the usual order) hit the last decision without a map. A
// zero-cost value with authorization off: Check returns nil and nothing is
// allocated. Not safe for concurrent use; one Memo serves one request.
type Memo struct {
	ctx  context.Context
	a    Authorizer
	op   Operation
	rt   ResourceType
	on   bool
	has  bool
	last string
	err  error
	seen map[string]error
}

// NewMemo returns a Memo checking op on resources of type rt for the
// caller in ctx.
func NewMemo(ctx context.Context, a Authorizer, op Operation, rt ResourceType) Memo {
	return Memo{ctx: ctx, a: a, op: op, rt: rt, on: a != nil && a.Enabled()}
}

// On reports whether the memo checks anything (authorization is on).
func (m *Memo) On() bool { return m.on }

// Check is Check(ctx, a, op, rt, name), decided once per name.
func (m *Memo) Check(name string) error {
	if !m.on {
		return nil
	}
	if m.has && name == m.last {
		return m.err
	}
	if m.has {
		// A second name: remember the previous one.
		if m.seen == nil {
			m.seen = map[string]error{}
		}
		m.seen[m.last] = m.err
	}
	err, ok := m.seen[name]
	if !ok {
		err = Check(m.ctx, m.a, m.op, m.rt, name)
	}
	m.has, m.last, m.err = true, name, err
	return err
}
