package quota

import (
	"slices"
	"strings"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

// ComponentFromProto converts one entity component.
func ComponentFromProto(c *controllerv1.QuotaEntityComponent) Component {
	return Component{Type: c.GetType(), Name: c.GetName(), Default: c.GetIsDefault()}
}

// ComponentToProto converts one entity component.
func ComponentToProto(c Component) *controllerv1.QuotaEntityComponent {
	return &controllerv1.QuotaEntityComponent{Type: c.Type, Name: c.Name, IsDefault: c.Default}
}

// EntityFromProto converts an entity's components, in their order.
func EntityFromProto(cs []*controllerv1.QuotaEntityComponent) []Component {
	out := make([]Component, 0, len(cs))
	for _, c := range cs {
		out = append(out, ComponentFromProto(c))
	}
	return out
}

// EntityToProto converts an entity's components, sorted by type (user,
// client-id, ip), the order entity keys print them in.
func EntityToProto(entity []Component) []*controllerv1.QuotaEntityComponent {
	cs := SortedEntity(entity)
	out := make([]*controllerv1.QuotaEntityComponent, 0, len(cs))
	for _, c := range cs {
		out = append(out, ComponentToProto(c))
	}
	return out
}

// SortedEntity returns a copy of entity sorted by component type (user,
// client-id, ip, then any other type by name).
func SortedEntity(entity []Component) []Component {
	cs := slices.Clone(entity)
	slices.SortStableFunc(cs, func(a, b Component) int {
		if d := typeOrder(a.Type) - typeOrder(b.Type); d != 0 {
			return d
		}
		return strings.Compare(a.Type, b.Type)
	})
	return cs
}

// EntryFromProto converts a stored or described quota entry.
func EntryFromProto(e *controllerv1.ClientQuotaEntry) Entry {
	vals := make(map[string]float64, len(e.GetValues()))
	for k, v := range e.GetValues() {
		vals[k] = v
	}
	return Entry{Entity: EntityFromProto(e.GetEntity()), Values: vals}
}

// EntryToProto converts a quota entry, its components sorted by type.
func EntryToProto(e Entry) *controllerv1.ClientQuotaEntry {
	vals := make(map[string]float64, len(e.Values))
	for k, v := range e.Values {
		vals[k] = v
	}
	return &controllerv1.ClientQuotaEntry{Entity: EntityToProto(e.Entity), Values: vals}
}

// FromProtoSet converts the metadata quota set (nil: no quotas).
func FromProtoSet(s *controllerv1.QuotaSet) []Entry {
	out := make([]Entry, 0, len(s.GetEntries()))
	for _, e := range s.GetEntries() {
		out = append(out, EntryFromProto(e))
	}
	return out
}

// FilterFromProto converts a DescribeClientQuotas request's filter. The
// proto's match types have this package's numbers.
func FilterFromProto(r *controllerv1.DescribeClientQuotasRequest) Filter {
	f := Filter{Strict: r.GetStrict()}
	for _, c := range r.GetComponents() {
		f.Components = append(f.Components, FilterComponent{Type: c.GetType(), Match: MatchType(c.GetMatchType()), Name: c.GetMatch()})
	}
	return f
}

// FilterToProto converts a filter to a DescribeClientQuotas request.
func FilterToProto(f Filter) *controllerv1.DescribeClientQuotasRequest {
	r := &controllerv1.DescribeClientQuotasRequest{Strict: f.Strict}
	for _, c := range f.Components {
		r.Components = append(r.Components, &controllerv1.QuotaFilterComponent{Type: c.Type, MatchType: controllerv1.QuotaMatchType(c.Match), Match: c.Name})
	}
	return r
}
