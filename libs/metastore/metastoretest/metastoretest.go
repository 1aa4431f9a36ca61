// Package metastoretest starts embedded etcd members on loopback for tests
// of the metastore and of its users: fast settings (10 ms ticks, no fsync),
// free ports, and quorums whose members can be closed and reopened.
package metastoretest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/metastore"
	"github.com/sluice-io/sluice/libs/testutil"
)

// Config returns a one-member configuration on free loopback ports.
func Config(t testing.TB) metastore.Config {
	ports := testutil.FreePorts(t, 2)
	return metastore.Config{
		ClientListen: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		PeerListen:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
		ClusterToken: "test",
		Prefix:       "/sluice",
		DialTimeout:  5 * time.Second,
		StartTimeout: 30 * time.Second,
		TickMs:       10,
		ElectionMs:   100,
		// Tests only: etcd's fsync would dominate their run time.
		UnsafeNoFsync: true,
	}
}

// Member is one member of a quorum started by StartQuorum.
type Member struct {
	Name   string
	Config metastore.Config
	Dir    string
	// Store is the open member, nil while it is closed.
	Store *metastore.Store
}

// Open (re)opens the member from its data directory.
func (m *Member) Open() error {
	s, err := metastore.Open(context.Background(), m.Config, m.Name, m.Dir, log.Discard())
	m.Store = s
	return err
}

// Close closes the member if it is open.
func (m *Member) Close() error {
	if m.Store == nil {
		return nil
	}
	err := m.Store.Close()
	m.Store = nil
	return err
}

// StartQuorum starts n members named c1..cn as one etcd cluster and closes
// those still open when the test ends (in parallel: one by one, each would
// wait for the others' election timeouts). A start that loses a port to
// another process between choosing and binding it is retried on new ports.
func StartQuorum(t testing.TB, n int) []*Member {
	t.Helper()
	for attempt := 1; ; attempt++ {
		members, err := startQuorum(t, n)
		if err == nil {
			return members
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("retrying on new ports: %v", err)
	}
}

func startQuorum(t testing.TB, n int) ([]*Member, error) {
	members := make([]*Member, n)
	var parts []string
	for i := range members {
		members[i] = &Member{Name: fmt.Sprintf("c%d", i+1), Config: Config(t), Dir: t.TempDir()}
		parts = append(parts, fmt.Sprintf("%s=http://%s", members[i].Name, members[i].Config.PeerListen))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range members {
		m.Config.InitialCluster = strings.Join(parts, ",")
		wg.Go(func() { errs[i] = m.Open() })
	}
	wg.Wait()
	closeAll := func() {
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Go(func() { _ = m.Close() })
		}
		wg.Wait()
	}
	for i, err := range errs {
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("starting etcd member %s: %w", members[i].Name, err)
		}
	}
	t.Cleanup(closeAll)
	return members, nil
}

// Stores returns the members' open stores.
func Stores(members []*Member) []*metastore.Store {
	out := make([]*metastore.Store, len(members))
	for i, m := range members {
		out[i] = m.Store
	}
	return out
}
