package quota

import (
	"fmt"
	"slices"
)

// MatchType says how a filter component matches an entity's component of
// the same type (KIP-546's match types).
type MatchType int

// Match types; the zero value is invalid, so an unset field is refused
// rather than read as "exact".
const (
	MatchUnknown MatchType = iota
	// MatchExact matches the named component (never the default).
	MatchExact
	// MatchDefault matches the default component of the type.
	MatchDefault
	// MatchAny matches any component of the type, named or default.
	MatchAny
)

// FilterComponent matches entities by one component type.
type FilterComponent struct {
	Type  string
	Match MatchType
	// Name is the name MatchExact compares with.
	Name string
}

// Filter selects quota entries as DescribeClientQuotas does: an entity
// matches when each component matches its component of the same type;
// with Strict, the entity has no components of other types. A filter with
// no components matches every entity unless Strict (then none).
type Filter struct {
	Components []FilterComponent
	Strict     bool
}

// Validate reports a filter that cannot be what was meant: an unknown type
// or match type, a type named twice, a name given with a match type that
// takes none.
func (f Filter) Validate() (field, problem string) {
	seen := map[string]bool{}
	for i, c := range f.Components {
		path := fmt.Sprintf("components[%d]", i)
		switch c.Type {
		case EntityUser, EntityClientID, EntityIP:
		default:
			return path + ".type", fmt.Sprintf("unknown quota entity type %q: use %q, %q or %q", c.Type, EntityUser, EntityClientID, EntityIP)
		}
		if seen[c.Type] {
			return path + ".type", fmt.Sprintf("the filter names %q twice", c.Type)
		}
		seen[c.Type] = true
		switch c.Match {
		case MatchExact:
		case MatchDefault, MatchAny:
			if c.Name != "" {
				return path + ".match", fmt.Sprintf("a name (%q) is given with a default or any match: give it only with an exact match", c.Name)
			}
		default:
			return path + ".match_type", fmt.Sprintf("unknown match type %d: want exact (1), default (2) or any (3)", c.Match)
		}
	}
	return "", ""
}

// Matches reports whether entity matches f.
func (f Filter) Matches(entity []Component) bool {
	for _, fc := range f.Components {
		i := slices.IndexFunc(entity, func(c Component) bool { return c.Type == fc.Type })
		if i < 0 {
			return false
		}
		c := entity[i]
		switch fc.Match {
		case MatchExact:
			if c.Default || c.Name != fc.Name {
				return false
			}
		case MatchDefault:
			if !c.Default {
				return false
			}
		case MatchAny:
		default:
			return false
		}
	}
	if f.Strict {
		for _, c := range entity {
			if !slices.ContainsFunc(f.Components, func(fc FilterComponent) bool { return fc.Type == c.Type }) {
				return false
			}
		}
	}
	return true
}
