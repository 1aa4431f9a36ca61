package client

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	controllerv1 "github.com/sluice-io/sluice/gen/go/sluice/controller/v1"
	edpb "github.com/sluice-io/sluice/gen/go/sluice/errordetails/v1"
	metadatav1 "github.com/sluice-io/sluice/gen/go/sluice/metadata/v1"
	"github.com/sluice-io/sluice/libs/client/errs"
)

// fakeController answers metadata naming controllerAddr as the active
// controller, and CreateTopics with answer (nil: success).
type fakeController struct {
	metadatav1.UnimplementedMetadataServiceServer
	controllerv1.UnimplementedControllerServiceServer

	controllerAddr string
	answer         *errs.Error
	calls          atomic.Int32
}

func (f *fakeController) GetMetadata(context.Context, *metadatav1.GetMetadataRequest) (*metadatav1.GetMetadataResponse, error) {
	return &metadatav1.GetMetadataResponse{ControllerId: 1, ControllerAddress: f.controllerAddr}, nil
}

func (f *fakeController) CreateTopics(context.Context, *controllerv1.CreateTopicsRequest) (*controllerv1.CreateTopicsResponse, error) {
	f.calls.Add(1)
	if f.answer != nil {
		return nil, f.answer
	}
	return &controllerv1.CreateTopicsResponse{}, nil
}

// startControllers serves each fake at its address, in process. Dialing
// "dead:1" is refused and dialing "paused:1" never completes, as with a
// killed and a stopped process.
func startControllers(t *testing.T, cfg Config, fakes map[string]*fakeController) *Client {
	t.Helper()
	lis := map[string]*bufconn.Listener{}
	var wg sync.WaitGroup
	var srvs []*grpc.Server
	t.Cleanup(func() {
		for _, s := range srvs {
			s.Stop()
		}
		wg.Wait()
	})
	for addr, f := range fakes {
		l := bufconn.Listen(1 << 20)
		srv := grpc.NewServer()
		metadatav1.RegisterMetadataServiceServer(srv, f)
		controllerv1.RegisterControllerServiceServer(srv, f)
		wg.Go(func() { _ = srv.Serve(l) })
		srvs = append(srvs, srv)
		lis[addr] = l
	}
	cfg.DialOptions = []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if l, ok := lis[addr]; ok {
				return l.DialContext(ctx)
			}
			if addr == "paused:1" {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func createTopic(c *Client) error {
	_, err := c.CreateTopics(context.Background(), &controllerv1.CreateTopicsRequest{Topics: []*controllerv1.TopicSpec{{Name: "t"}}})
	return err
}

// Metadata still names an active controller that is dead (its connection
// refused) or paused (its connection never up): the call goes on to the
// other controllers, and when its time runs out it returns what the
// survivor answered, not the transport failure.
func TestAdminReturnsLastServerAnswerPastDeadController(t *testing.T) {
	for _, gone := range []string{"dead:1", "paused:1"} {
		t.Run(gone, func(t *testing.T) {
			lost := errs.New(errs.ControllerQuorumUnavailable, "controller quorum has no majority: reachable members [2], unreachable [1 3]")
			survivor := &fakeController{controllerAddr: gone, answer: lost}
			c := startControllers(t, Config{
				Bootstrap:        []string{gone, "survivor:1"},
				RequestTimeout:   time.Second,
				BootstrapTimeout: 100 * time.Millisecond,
			}, map[string]*fakeController{"survivor:1": survivor})
			err := createTopic(c)
			require.True(t, errs.Is(err, errs.ControllerQuorumUnavailable), "got %v", err)
			require.ErrorContains(t, err, "reachable members [2], unreachable [1 3]")
			require.Equal(t, codes.Unavailable, status.Code(err))
			require.Greater(t, survivor.calls.Load(), int32(1), "retried before giving up")
		})
	}
}

// A standby's NOT_CONTROLLER hint is followed; a non-retriable answer ends
// the call at once.
func TestAdminFollowsHintAndStopsOnFinalAnswer(t *testing.T) {
	notController := errs.New(errs.NotController, "controller 2 is a standby").WithController(&edpb.ControllerHint{ControllerId: 3, Address: "active:1"})
	active := &fakeController{}
	fakes := map[string]*fakeController{
		"standby:1": {controllerAddr: "dead:1", answer: notController},
		"active:1":  active,
	}
	c := startControllers(t, Config{Bootstrap: []string{"standby:1"}, RequestTimeout: 10 * time.Second}, fakes)
	require.NoError(t, createTopic(c))
	require.Equal(t, int32(1), active.calls.Load())

	active.answer = errs.New(errs.TopicAlreadyExists, "topic \"t\" already exists")
	err := createTopic(c)
	require.True(t, errs.Is(err, errs.TopicAlreadyExists), "got %v", err)
	require.Equal(t, int32(2), active.calls.Load(), "a non-retriable answer is not retried")
}
