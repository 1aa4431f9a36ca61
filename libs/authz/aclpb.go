package authz

import (
	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
)

var rtToProto = map[ResourceType]controllerv1.ResourceType{
	Topic:           controllerv1.ResourceType_RESOURCE_TYPE_TOPIC,
	Group:           controllerv1.ResourceType_RESOURCE_TYPE_GROUP,
	Cluster:         controllerv1.ResourceType_RESOURCE_TYPE_CLUSTER,
	TransactionalID: controllerv1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID,
}

// ResourceTypeFromProto converts a proto resource type; types ACLs do not
// apply to (unset, BROKER) become ResourceUnknown.
func ResourceTypeFromProto(rt controllerv1.ResourceType) ResourceType {
	for k, v := range rtToProto {
		if v == rt {
			return k
		}
	}
	return ResourceUnknown
}

// ResourceTypeToProto converts a resource type to its proto value.
func ResourceTypeToProto(rt ResourceType) controllerv1.ResourceType { return rtToProto[rt] }

// FromProto converts an ACL binding. The proto enums of operations,
// permissions and pattern types have the numbers of this package's
// constants; unknown values stay unknown and fail Validate.
func FromProto(b *controllerv1.AclBinding) ACL {
	return ACL{
		Principal:    b.GetPrincipal(),
		Host:         b.GetHost(),
		Operation:    Operation(b.GetOperation()),
		Permission:   Permission(b.GetPermission()),
		ResourceType: ResourceTypeFromProto(b.GetResourceType()),
		Name:         b.GetResourceName(),
		Pattern:      PatternType(b.GetPatternType()),
	}
}

// ToProto converts an ACL to its binding.
func ToProto(a ACL) *controllerv1.AclBinding {
	return &controllerv1.AclBinding{
		ResourceType: ResourceTypeToProto(a.ResourceType),
		ResourceName: a.Name,
		PatternType:  controllerv1.PatternType(a.Pattern),
		Principal:    a.Principal,
		Host:         a.Host,
		Operation:    controllerv1.AclOperation(a.Operation),
		Permission:   controllerv1.AclPermission(a.Permission),
	}
}

// FilterFromProto converts a binding used as a filter (DescribeAcls,
// DeleteAcls): unset fields match anything. A nil binding matches every
// ACL.
func FilterFromProto(b *controllerv1.AclBinding) Filter {
	a := FromProto(b)
	return Filter(a)
}

// FromProtoSet converts a metadata ACL set.
func FromProtoSet(s *controllerv1.AclSet) []ACL {
	out := make([]ACL, 0, len(s.GetBindings()))
	for _, b := range s.GetBindings() {
		out = append(out, FromProto(b))
	}
	return out
}
