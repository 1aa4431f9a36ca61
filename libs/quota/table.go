package quota

import "sort"

// Table is an immutable set of quota entries, indexed for the lookups the
// enforcement makes per request. Entries for the same entity are merged,
// later values replacing earlier ones.
type Table struct {
	entries []Entry
	byKey   map[string]map[string]float64
}

// NewTable returns a table of entries. Entries that fail Validate are
// skipped: the controller validates before it stores, so an invalid entry
// here can only come from a newer release, and enforcing the rest is safer
// than enforcing nothing.
func NewTable(entries []Entry) *Table {
	t := &Table{byKey: map[string]map[string]float64{}}
	keys := []string{}
	ents := map[string][]Component{}
	for _, e := range entries {
		if e.Validate() != nil {
			continue
		}
		k := EntityKey(e.Entity)
		vals, ok := t.byKey[k]
		if !ok {
			vals = map[string]float64{}
			t.byKey[k] = vals
			keys = append(keys, k)
			ents[k] = append([]Component(nil), e.Entity...)
		}
		for name, v := range e.Values {
			vals[name] = v
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		vals := make(map[string]float64, len(t.byKey[k]))
		for name, v := range t.byKey[k] {
			vals[name] = v
		}
		t.entries = append(t.entries, Entry{Entity: ents[k], Values: vals})
	}
	return t
}

// Entries returns the table's entries, one per entity, sorted by entity
// key. The caller may modify the returned slice and maps.
func (t *Table) Entries() []Entry {
	if t == nil {
		return nil
	}
	out := make([]Entry, len(t.entries))
	for i, e := range t.entries {
		vals := make(map[string]float64, len(e.Values))
		for k, v := range e.Values {
			vals[k] = v
		}
		out[i] = Entry{Entity: append([]Component(nil), e.Entity...), Values: vals}
	}
	return out
}

// value returns the quota key configured for the entity key ek.
func (t *Table) value(ek, key string) (float64, bool) {
	if t == nil {
		return 0, false
	}
	v, ok := t.byKey[ek][key]
	return v, ok
}
