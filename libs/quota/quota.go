// Package quota holds Kafka-style client quotas: the configuration model
// (entities of user, client-id and ip components with producer_byte_rate,
// consumer_byte_rate, request_percentage and connection_creation_rate
// values) and the per-process enforcement that measures each matched
// entity's rate over a sliding window of samples and tells clients over
// their quota how long to back off.
package quota

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Quota config keys, with Kafka's names.
const (
	// ProducerByteRate caps the bytes per second a user/client-id produces.
	ProducerByteRate = "producer_byte_rate"
	// ConsumerByteRate caps the bytes per second a user/client-id fetches.
	ConsumerByteRate = "consumer_byte_rate"
	// RequestPercentage caps the share of one request-handling thread a
	// user/client-id may use, in percent over the quota window.
	RequestPercentage = "request_percentage"
	// ConnectionCreationRate caps the new connections per second from an ip.
	ConnectionCreationRate = "connection_creation_rate"
)

// Entity component types, with Kafka's names.
const (
	EntityUser     = "user"
	EntityClientID = "client-id"
	EntityIP       = "ip"
)

// DefaultName is how an entity key prints a default component (Kafka's
// "<default>").
const DefaultName = "<default>"

// Component is one part of a quota entity: a user, a client id or an ip,
// either named or the default for its type (Kafka's <default>; Name is
// then empty).
type Component struct {
	Type    string
	Name    string
	Default bool
}

// Entry is the quota values configured for one entity.
type Entry struct {
	Entity []Component
	Values map[string]float64
}

var (
	userKeys = map[string]bool{ProducerByteRate: true, ConsumerByteRate: true, RequestPercentage: true}
	ipKeys   = map[string]bool{ConnectionCreationRate: true}
)

// Validate reports whether e is a quota Kafka would accept: known component
// types, none repeated, ip never combined with user or client-id, a name
// exactly when the component is not the default, a parsable address for a
// named ip, keys that apply to the entity's kind and positive finite values.
func (e Entry) Validate() error {
	if len(e.Entity) == 0 {
		return errors.New("quota entity is empty: give at least one of user, client-id or ip")
	}
	seen := map[string]bool{}
	for _, c := range e.Entity {
		switch c.Type {
		case EntityUser, EntityClientID, EntityIP:
		default:
			return fmt.Errorf("unknown quota entity type %q: use %q, %q or %q", c.Type, EntityUser, EntityClientID, EntityIP)
		}
		if seen[c.Type] {
			return fmt.Errorf("quota entity names %q twice", c.Type)
		}
		seen[c.Type] = true
		if c.Default && c.Name != "" {
			return fmt.Errorf("quota entity %s is the default and also named %q: give one or the other", c.Type, c.Name)
		}
		if !c.Default && c.Name == "" && c.Type != EntityClientID {
			return fmt.Errorf("quota entity %s has an empty name: give a name or mark it the default", c.Type)
		}
		if c.Type == EntityIP && !c.Default {
			if _, err := netip.ParseAddr(c.Name); err != nil {
				return fmt.Errorf("quota entity ip %q is not an IP address: %w", c.Name, err)
			}
		}
	}
	isIP := seen[EntityIP]
	if isIP && len(e.Entity) > 1 {
		return errors.New("quota entity combines ip with user or client-id: ip quotas stand alone")
	}
	if len(e.Values) == 0 {
		return fmt.Errorf("quota for %s sets no values", EntityKey(e.Entity))
	}
	for k, v := range e.Values {
		if isIP && !ipKeys[k] {
			if userKeys[k] {
				return fmt.Errorf("quota key %s applies to user/client-id entities, not ip", k)
			}
			return fmt.Errorf("unknown quota key %q for an ip entity: use %s", k, ConnectionCreationRate)
		}
		if !isIP && !userKeys[k] {
			if ipKeys[k] {
				return fmt.Errorf("quota key %s applies to ip entities, not user/client-id", k)
			}
			return fmt.Errorf("unknown quota key %q: use %s, %s or %s", k, ProducerByteRate, ConsumerByteRate, RequestPercentage)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return fmt.Errorf("quota %s=%v for %s must be a positive number", k, v, EntityKey(e.Entity))
		}
	}
	return nil
}

// typeOrder fixes the order of components in an entity key.
func typeOrder(t string) int {
	switch t {
	case EntityUser:
		return 0
	case EntityClientID:
		return 1
	case EntityIP:
		return 2
	}
	return 3
}

// EntityKey returns a canonical string for an entity, the same whatever the
// order of its components: "user=alice,client-id=<default>".
func EntityKey(entity []Component) string {
	cs := append([]Component(nil), entity...)
	sort.SliceStable(cs, func(i, j int) bool {
		oi, oj := typeOrder(cs[i].Type), typeOrder(cs[j].Type)
		if oi != oj {
			return oi < oj
		}
		return cs[i].Type < cs[j].Type
	})
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Type)
		b.WriteByte('=')
		if c.Default {
			b.WriteString(DefaultName)
		} else {
			b.WriteString(keyName(c.Name))
		}
	}
	return b.String()
}

// keyName writes a name into an entity key. Names are chosen by clients
// (a client id) or operators, so one holding a separator, a quote or the
// default's spelling is quoted: the user "a,client-id=b" must not share a
// key, and so a quota and a sensor, with user "a" and client id "b".
func keyName(name string) string {
	if name == DefaultName || strings.ContainsAny(name, ",=\"\\") {
		return strconv.Quote(name)
	}
	return name
}
