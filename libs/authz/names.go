package authz

import (
	"fmt"
	"strings"
)

var resourceNames = map[ResourceType]string{
	Topic: "Topic", Group: "Group", Cluster: "Cluster", TransactionalID: "TransactionalId",
}

var operationNames = map[Operation]string{
	All: "All", Read: "Read", Write: "Write", Create: "Create", Delete: "Delete", Alter: "Alter",
	Describe: "Describe", ClusterAction: "ClusterAction", DescribeConfigs: "DescribeConfigs",
	AlterConfigs: "AlterConfigs", IdempotentWrite: "IdempotentWrite",
}

// String names the resource type as Kafka does ("Topic", "TransactionalId").
func (rt ResourceType) String() string {
	if n, ok := resourceNames[rt]; ok {
		return n
	}
	return fmt.Sprintf("ResourceType(%d)", int(rt))
}

// String names the operation as Kafka does ("Describe", "IdempotentWrite").
func (op Operation) String() string {
	if n, ok := operationNames[op]; ok {
		return n
	}
	return fmt.Sprintf("Operation(%d)", int(op))
}

// String names the permission ("Allow", "Deny").
func (p Permission) String() string {
	switch p {
	case Allow:
		return "Allow"
	case Deny:
		return "Deny"
	}
	return fmt.Sprintf("Permission(%d)", int(p))
}

// String names the pattern type ("LITERAL", "PREFIXED").
func (p PatternType) String() string {
	switch p {
	case Literal:
		return "LITERAL"
	case Prefixed:
		return "PREFIXED"
	}
	return fmt.Sprintf("PatternType(%d)", int(p))
}

// canon folds a name for lookup: lower case without '-', '_' or spaces, so
// "describe-configs", "DESCRIBE_CONFIGS" and "DescribeConfigs" are one.
func canon(s string) string {
	return strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.ToLower(s))
}

// ParseOperation parses an operation name in any case, with or without
// '-' or '_' between words ("Read", "idempotent-write", "DESCRIBE_CONFIGS").
func ParseOperation(s string) (Operation, error) {
	c := canon(s)
	for op, n := range operationNames {
		if canon(n) == c {
			return op, nil
		}
	}
	names := make([]string, 0, len(operationNames))
	for op := All; op <= IdempotentWrite; op++ {
		names = append(names, op.String())
	}
	return OpUnknown, fmt.Errorf("unknown operation %q: want one of %s", s, strings.Join(names, ", "))
}

// ParseResourceType parses a resource type name in any case ("topic",
// "transactional-id", "TransactionalId").
func ParseResourceType(s string) (ResourceType, error) {
	c := canon(s)
	for rt, n := range resourceNames {
		if canon(n) == c {
			return rt, nil
		}
	}
	return ResourceUnknown, fmt.Errorf("unknown resource type %q: want Topic, Group, Cluster or TransactionalId", s)
}

// ParsePatternType parses "literal" or "prefixed" in any case.
func ParsePatternType(s string) (PatternType, error) {
	switch canon(s) {
	case "literal":
		return Literal, nil
	case "prefixed":
		return Prefixed, nil
	}
	return PatternUnknown, fmt.Errorf("unknown resource pattern type %q: want LITERAL or PREFIXED", s)
}
