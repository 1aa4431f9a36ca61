package errs

import (
	"google.golang.org/grpc/codes"

	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
)

// Code is Sluice's stable error code (the generated ErrorCode enum). Where
// Kafka has the same error, the number is Kafka's code.
type Code = edpb.ErrorCode

// The codes used throughout the code base, named without the proto prefix.
const (
	None                         = edpb.ErrorCode_ERROR_CODE_UNSPECIFIED
	OffsetOutOfRange             = edpb.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE
	CorruptMessage               = edpb.ErrorCode_ERROR_CODE_CORRUPT_MESSAGE
	UnknownTopicOrPartition      = edpb.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION
	LeaderNotAvailable           = edpb.ErrorCode_ERROR_CODE_LEADER_NOT_AVAILABLE
	NotLeaderOrFollower          = edpb.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER
	RequestTimedOut              = edpb.ErrorCode_ERROR_CODE_REQUEST_TIMED_OUT
	BrokerNotAvailable           = edpb.ErrorCode_ERROR_CODE_BROKER_NOT_AVAILABLE
	ReplicaNotAvailable          = edpb.ErrorCode_ERROR_CODE_REPLICA_NOT_AVAILABLE
	MessageTooLarge              = edpb.ErrorCode_ERROR_CODE_MESSAGE_TOO_LARGE
	OffsetMetadataTooLarge       = edpb.ErrorCode_ERROR_CODE_OFFSET_METADATA_TOO_LARGE
	CoordinatorLoadInProgress    = edpb.ErrorCode_ERROR_CODE_COORDINATOR_LOAD_IN_PROGRESS
	CoordinatorNotAvailable      = edpb.ErrorCode_ERROR_CODE_COORDINATOR_NOT_AVAILABLE
	NotCoordinator               = edpb.ErrorCode_ERROR_CODE_NOT_COORDINATOR
	InvalidTopic                 = edpb.ErrorCode_ERROR_CODE_INVALID_TOPIC_EXCEPTION
	NotEnoughReplicas            = edpb.ErrorCode_ERROR_CODE_NOT_ENOUGH_REPLICAS
	NotEnoughReplicasAfterAppend = edpb.ErrorCode_ERROR_CODE_NOT_ENOUGH_REPLICAS_AFTER_APPEND
	InvalidRequiredAcks          = edpb.ErrorCode_ERROR_CODE_INVALID_REQUIRED_ACKS
	IllegalGeneration            = edpb.ErrorCode_ERROR_CODE_ILLEGAL_GENERATION
	InconsistentGroupProtocol    = edpb.ErrorCode_ERROR_CODE_INCONSISTENT_GROUP_PROTOCOL
	InvalidGroupID               = edpb.ErrorCode_ERROR_CODE_INVALID_GROUP_ID
	UnknownMemberID              = edpb.ErrorCode_ERROR_CODE_UNKNOWN_MEMBER_ID
	InvalidSessionTimeout        = edpb.ErrorCode_ERROR_CODE_INVALID_SESSION_TIMEOUT
	RebalanceInProgress          = edpb.ErrorCode_ERROR_CODE_REBALANCE_IN_PROGRESS
	TopicAuthorizationFailed     = edpb.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED
	GroupAuthorizationFailed     = edpb.ErrorCode_ERROR_CODE_GROUP_AUTHORIZATION_FAILED
	ClusterAuthorizationFailed   = edpb.ErrorCode_ERROR_CODE_CLUSTER_AUTHORIZATION_FAILED
	InvalidTimestamp             = edpb.ErrorCode_ERROR_CODE_INVALID_TIMESTAMP
	TopicAlreadyExists           = edpb.ErrorCode_ERROR_CODE_TOPIC_ALREADY_EXISTS
	InvalidPartitions            = edpb.ErrorCode_ERROR_CODE_INVALID_PARTITIONS
	InvalidReplicationFactor     = edpb.ErrorCode_ERROR_CODE_INVALID_REPLICATION_FACTOR
	InvalidReplicaAssignment     = edpb.ErrorCode_ERROR_CODE_INVALID_REPLICA_ASSIGNMENT
	InvalidConfig                = edpb.ErrorCode_ERROR_CODE_INVALID_CONFIG
	NotController                = edpb.ErrorCode_ERROR_CODE_NOT_CONTROLLER
	InvalidRequest               = edpb.ErrorCode_ERROR_CODE_INVALID_REQUEST
	PolicyViolation              = edpb.ErrorCode_ERROR_CODE_POLICY_VIOLATION
	OutOfOrderSequenceNumber     = edpb.ErrorCode_ERROR_CODE_OUT_OF_ORDER_SEQUENCE_NUMBER
	DuplicateSequenceNumber      = edpb.ErrorCode_ERROR_CODE_DUPLICATE_SEQUENCE_NUMBER
	InvalidProducerEpoch         = edpb.ErrorCode_ERROR_CODE_INVALID_PRODUCER_EPOCH
	InvalidTxnState              = edpb.ErrorCode_ERROR_CODE_INVALID_TXN_STATE
	InvalidProducerIDMapping     = edpb.ErrorCode_ERROR_CODE_INVALID_PRODUCER_ID_MAPPING
	InvalidTransactionTimeout    = edpb.ErrorCode_ERROR_CODE_INVALID_TRANSACTION_TIMEOUT
	ConcurrentTransactions       = edpb.ErrorCode_ERROR_CODE_CONCURRENT_TRANSACTIONS
	StorageError                 = edpb.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR
	UnknownProducerID            = edpb.ErrorCode_ERROR_CODE_UNKNOWN_PRODUCER_ID
	ReassignmentInProgress       = edpb.ErrorCode_ERROR_CODE_REASSIGNMENT_IN_PROGRESS
	NonEmptyGroup                = edpb.ErrorCode_ERROR_CODE_NON_EMPTY_GROUP
	GroupIDNotFound              = edpb.ErrorCode_ERROR_CODE_GROUP_ID_NOT_FOUND
	FencedLeaderEpoch            = edpb.ErrorCode_ERROR_CODE_FENCED_LEADER_EPOCH
	UnknownLeaderEpoch           = edpb.ErrorCode_ERROR_CODE_UNKNOWN_LEADER_EPOCH
	UnsupportedCompressionType   = edpb.ErrorCode_ERROR_CODE_UNSUPPORTED_COMPRESSION_TYPE
	StaleBrokerEpoch             = edpb.ErrorCode_ERROR_CODE_STALE_BROKER_EPOCH
	OffsetNotAvailable           = edpb.ErrorCode_ERROR_CODE_OFFSET_NOT_AVAILABLE
	PreferredLeaderNotAvailable  = edpb.ErrorCode_ERROR_CODE_PREFERRED_LEADER_NOT_AVAILABLE
	FencedInstanceID             = edpb.ErrorCode_ERROR_CODE_FENCED_INSTANCE_ID
	EligibleLeadersNotAvailable  = edpb.ErrorCode_ERROR_CODE_ELIGIBLE_LEADERS_NOT_AVAILABLE
	ElectionNotNeeded            = edpb.ErrorCode_ERROR_CODE_ELECTION_NOT_NEEDED
	NoReassignmentInProgress     = edpb.ErrorCode_ERROR_CODE_NO_REASSIGNMENT_IN_PROGRESS
	InvalidRecord                = edpb.ErrorCode_ERROR_CODE_INVALID_RECORD
	UnstableOffsetCommit         = edpb.ErrorCode_ERROR_CODE_UNSTABLE_OFFSET_COMMIT
	ThrottlingQuotaExceeded      = edpb.ErrorCode_ERROR_CODE_THROTTLING_QUOTA_EXCEEDED
	ProducerFenced               = edpb.ErrorCode_ERROR_CODE_PRODUCER_FENCED
	ResourceNotFound             = edpb.ErrorCode_ERROR_CODE_RESOURCE_NOT_FOUND
	InvalidUpdateVersion         = edpb.ErrorCode_ERROR_CODE_INVALID_UPDATE_VERSION
	DuplicateBrokerRegistration  = edpb.ErrorCode_ERROR_CODE_DUPLICATE_BROKER_REGISTRATION
	BrokerIDNotRegistered        = edpb.ErrorCode_ERROR_CODE_BROKER_ID_NOT_REGISTERED
	InconsistentClusterID        = edpb.ErrorCode_ERROR_CODE_INCONSISTENT_CLUSTER_ID
	TransactionalIDNotFound      = edpb.ErrorCode_ERROR_CODE_TRANSACTIONAL_ID_NOT_FOUND
	FencedMemberEpoch            = edpb.ErrorCode_ERROR_CODE_FENCED_MEMBER_EPOCH
	UnsupportedAssignor          = edpb.ErrorCode_ERROR_CODE_UNSUPPORTED_ASSIGNOR
	StaleMemberEpoch             = edpb.ErrorCode_ERROR_CODE_STALE_MEMBER_EPOCH
	UnknownServerError           = edpb.ErrorCode_ERROR_CODE_UNKNOWN_SERVER_ERROR
	Unimplemented                = edpb.ErrorCode_ERROR_CODE_UNIMPLEMENTED
	NodeNotReady                 = edpb.ErrorCode_ERROR_CODE_NODE_NOT_READY
	NodeUnreachable              = edpb.ErrorCode_ERROR_CODE_NODE_UNREACHABLE
)

// Entry is one row of the catalog.
type Entry struct {
	// Retriable says whether the same request may succeed later, possibly
	// after a metadata refresh or after following a hint. It follows Kafka's
	// classification for codes Kafka has.
	Retriable bool
	// GRPC is the gRPC status code a whole-call failure with this code maps
	// to.
	GRPC codes.Code
	// Kafka is the Kafka protocol error code to answer with; -1
	// (UNKNOWN_SERVER_ERROR) where Kafka has no equivalent.
	Kafka int16
}

// catalog is the single mapping table from error code to retriability and
// gRPC status. Keep it in the proto enum's order.
var catalog = map[Code]Entry{
	None:                         {false, codes.OK, 0},
	OffsetOutOfRange:             {false, codes.OutOfRange, 1},
	CorruptMessage:               {true, codes.InvalidArgument, 2},
	UnknownTopicOrPartition:      {true, codes.NotFound, 3},
	LeaderNotAvailable:           {true, codes.Unavailable, 5},
	NotLeaderOrFollower:          {true, codes.Unavailable, 6},
	RequestTimedOut:              {true, codes.DeadlineExceeded, 7},
	BrokerNotAvailable:           {true, codes.Unavailable, 8},
	ReplicaNotAvailable:          {true, codes.Unavailable, 9},
	MessageTooLarge:              {false, codes.InvalidArgument, 10},
	OffsetMetadataTooLarge:       {false, codes.InvalidArgument, 12},
	CoordinatorLoadInProgress:    {true, codes.Unavailable, 14},
	CoordinatorNotAvailable:      {true, codes.Unavailable, 15},
	NotCoordinator:               {true, codes.FailedPrecondition, 16},
	InvalidTopic:                 {false, codes.InvalidArgument, 17},
	NotEnoughReplicas:            {true, codes.Unavailable, 19},
	NotEnoughReplicasAfterAppend: {true, codes.Unavailable, 20},
	InvalidRequiredAcks:          {false, codes.InvalidArgument, 21},
	IllegalGeneration:            {false, codes.FailedPrecondition, 22},
	InconsistentGroupProtocol:    {false, codes.FailedPrecondition, 23},
	InvalidGroupID:               {false, codes.InvalidArgument, 24},
	UnknownMemberID:              {false, codes.FailedPrecondition, 25},
	InvalidSessionTimeout:        {false, codes.InvalidArgument, 26},
	RebalanceInProgress:          {false, codes.FailedPrecondition, 27},
	TopicAuthorizationFailed:     {false, codes.PermissionDenied, 29},
	GroupAuthorizationFailed:     {false, codes.PermissionDenied, 30},
	ClusterAuthorizationFailed:   {false, codes.PermissionDenied, 31},
	InvalidTimestamp:             {false, codes.InvalidArgument, 32},
	TopicAlreadyExists:           {false, codes.AlreadyExists, 36},
	InvalidPartitions:            {false, codes.InvalidArgument, 37},
	InvalidReplicationFactor:     {false, codes.InvalidArgument, 38},
	InvalidReplicaAssignment:     {false, codes.InvalidArgument, 39},
	InvalidConfig:                {false, codes.InvalidArgument, 40},
	NotController:                {true, codes.FailedPrecondition, 41},
	InvalidRequest:               {false, codes.InvalidArgument, 42},
	PolicyViolation:              {false, codes.FailedPrecondition, 44},
	OutOfOrderSequenceNumber:     {false, codes.FailedPrecondition, 45},
	DuplicateSequenceNumber:      {false, codes.AlreadyExists, 46},
	InvalidProducerEpoch:         {false, codes.FailedPrecondition, 47},
	InvalidTxnState:              {false, codes.FailedPrecondition, 48},
	InvalidProducerIDMapping:     {false, codes.FailedPrecondition, 49},
	InvalidTransactionTimeout:    {false, codes.InvalidArgument, 50},
	ConcurrentTransactions:       {false, codes.Aborted, 51},
	StorageError:                 {true, codes.Unavailable, 56},
	UnknownProducerID:            {false, codes.FailedPrecondition, 59},
	ReassignmentInProgress:       {false, codes.FailedPrecondition, 60},
	NonEmptyGroup:                {false, codes.FailedPrecondition, 68},
	GroupIDNotFound:              {false, codes.NotFound, 69},
	FencedLeaderEpoch:            {true, codes.FailedPrecondition, 74},
	UnknownLeaderEpoch:           {true, codes.Unavailable, 75},
	UnsupportedCompressionType:   {false, codes.InvalidArgument, 76},
	StaleBrokerEpoch:             {false, codes.FailedPrecondition, 77},
	OffsetNotAvailable:           {true, codes.Unavailable, 78},
	PreferredLeaderNotAvailable:  {true, codes.Unavailable, 80},
	FencedInstanceID:             {false, codes.FailedPrecondition, 82},
	EligibleLeadersNotAvailable:  {true, codes.Unavailable, 83},
	ElectionNotNeeded:            {true, codes.FailedPrecondition, 84},
	NoReassignmentInProgress:     {false, codes.FailedPrecondition, 85},
	InvalidRecord:                {false, codes.InvalidArgument, 87},
	UnstableOffsetCommit:         {true, codes.Unavailable, 88},
	ThrottlingQuotaExceeded:      {true, codes.ResourceExhausted, 89},
	ProducerFenced:               {false, codes.FailedPrecondition, 90},
	ResourceNotFound:             {false, codes.NotFound, 91},
	InvalidUpdateVersion:         {false, codes.Aborted, 95},
	DuplicateBrokerRegistration:  {false, codes.AlreadyExists, 101},
	BrokerIDNotRegistered:        {false, codes.NotFound, 102},
	InconsistentClusterID:        {false, codes.FailedPrecondition, 104},
	TransactionalIDNotFound:      {false, codes.NotFound, 105},
	FencedMemberEpoch:            {false, codes.FailedPrecondition, 110},
	UnsupportedAssignor:          {false, codes.InvalidArgument, 112},
	StaleMemberEpoch:             {false, codes.FailedPrecondition, 113},
	UnknownServerError:           {false, codes.Internal, -1},
	Unimplemented:                {false, codes.Unimplemented, -1},
	NodeNotReady:                 {true, codes.Unavailable, -1},
	NodeUnreachable:              {true, codes.Unavailable, -1},
}

// Lookup returns the catalog entry of a code. An unknown code (from a newer
// server) is treated as a non-retriable internal error.
func Lookup(c Code) Entry {
	if e, ok := catalog[c]; ok {
		return e
	}
	return Entry{Retriable: false, GRPC: codes.Internal, Kafka: -1}
}

// Name returns the code's short name, such as "NOT_LEADER_OR_FOLLOWER".
func Name(c Code) string {
	n := c.String()
	const prefix = "ERROR_CODE_"
	if len(n) > len(prefix) && n[:len(prefix)] == prefix {
		return n[len(prefix):]
	}
	return n
}
