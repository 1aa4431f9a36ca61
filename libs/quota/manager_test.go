package quota

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time                     { return c.t }
func (c *fakeClock) add(d time.Duration)                { c.t = c.t.Add(d) }
func newClock() *fakeClock                              { return &fakeClock{t: time.Unix(1_000_000, 0)} }
func named(typ, name string) Component                  { return Component{Type: typ, Name: name} }
func dflt(typ string) Component                         { return Component{Type: typ, Default: true} }
func entry(v map[string]float64, cs ...Component) Entry { return Entry{Entity: cs, Values: v} }

func TestThrottleMath(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 1000}, named(EntityClientID, "a"))}), 1)

	// Within the first sample the span is one sample: 1000 bytes is the
	// quota exactly, not over it.
	require.Zero(t, m.RecordProduce("User:ANONYMOUS", "a", 1000))
	// 3000 bytes in a 1 s span is 3x the quota: back off until the rate is
	// the quota again, (3000-1000)/1000 * 1 s = 2 s.
	require.Equal(t, 2*time.Second, m.RecordProduce("User:ANONYMOUS", "a", 2000))

	// Half a sample later: 3500 bytes over 1 s... the span is still the
	// minimum one sample; move into the third sample: span 2.5 s,
	// 3500/2.5 = 1400/s, throttle (1400-1000)/1000 * 2.5 s = 1 s.
	clk.add(2500 * time.Millisecond)
	require.Equal(t, time.Second, m.RecordProduce("User:ANONYMOUS", "a", 500))
	// 4 s into it: 3500/4 = 875/s, under the quota.
	clk.add(1500 * time.Millisecond)
	require.Zero(t, m.RecordProduce("User:ANONYMOUS", "a", 0))
	// 250 more: 3750/4 s = 937.5/s, still under; 750 more: 4500/4 = 1125/s
	// over by 12.5 %: throttle 0.125 * 4 s = 500 ms.
	require.Zero(t, m.RecordProduce("User:ANONYMOUS", "a", 250))
	require.Equal(t, 500*time.Millisecond, m.RecordProduce("User:ANONYMOUS", "a", 750))

	// Other clients have no quota.
	require.Zero(t, m.RecordProduce("User:ANONYMOUS", "b", 1<<30))
	// Fetch has no quota for a.
	require.Zero(t, m.RecordFetch("User:ANONYMOUS", "a", 1<<30))
}

func TestWindowSlides(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now, WindowNum: 3, WindowSize: time.Second})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ConsumerByteRate: 100}, dflt(EntityClientID))}), 1)
	// 100x the quota: capped at the window, 3 samples.
	require.Equal(t, 3*time.Second, m.RecordFetch("User:x", "c", 10_000))
	// Three samples later the burst has left the window.
	clk.add(3 * time.Second)
	require.Zero(t, m.RecordFetch("User:x", "c", 100))
}

func TestRequestPercentage(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{RequestPercentage: 10}, named(EntityUser, "alice"))}), 1)
	// 50 ms of handling in a 1 s span is 5 %.
	require.Zero(t, m.RecordRequestTime("User:alice", "x", 50*time.Millisecond))
	// 200 ms is 20 %: twice the quota, throttle 1 s.
	require.Equal(t, time.Second, m.RecordRequestTime("User:alice", "y", 150*time.Millisecond))
}

func TestPrecedence(t *testing.T) {
	q := func(v float64, cs ...Component) Entry { return entry(map[string]float64{ProducerByteRate: v}, cs...) }
	tbl := NewTable([]Entry{
		q(1, named(EntityUser, "alice"), named(EntityClientID, "app")),
		q(2, named(EntityUser, "alice"), dflt(EntityClientID)),
		q(3, named(EntityUser, "bob")),
		q(4, dflt(EntityUser), named(EntityClientID, "app")),
		q(5, dflt(EntityUser), dflt(EntityClientID)),
		q(7, named(EntityClientID, "tool")),
		q(8, dflt(EntityClientID)),
	})
	cases := []struct {
		user, cid string
		want      float64
		entity    string
	}{
		{"alice", "app", 1, "user=alice,client-id=app"},
		{"alice", "other", 2, "user=alice,client-id=other"},
		{"bob", "app", 3, "user=bob"},
		{"carol", "app", 4, "user=carol,client-id=app"},
		{"carol", "tool", 5, "user=carol,client-id=tool"},
	}
	for _, c := range cases {
		ent, v, ok := resolve(tbl, client{c.user, c.cid}, ProducerByteRate)
		require.True(t, ok, c)
		require.Equal(t, c.want, v, c)
		require.Equal(t, c.entity, ent, c)
	}

	// Without user defaults: default user alone, then client ids.
	tbl = NewTable([]Entry{q(6, dflt(EntityUser)), q(7, named(EntityClientID, "tool"))})
	ent, v, _ := resolve(tbl, client{"dave", "tool"}, ProducerByteRate)
	require.Equal(t, 6.0, v)
	require.Equal(t, "user=dave", ent)
	tbl = NewTable([]Entry{q(7, named(EntityClientID, "tool")), q(8, dflt(EntityClientID))})
	ent, v, _ = resolve(tbl, client{"dave", "tool"}, ProducerByteRate)
	require.Equal(t, 7.0, v)
	require.Equal(t, "client-id=tool", ent)
	ent, v, _ = resolve(tbl, client{"dave", "x"}, ProducerByteRate)
	require.Equal(t, 8.0, v)
	require.Equal(t, "client-id=x", ent)
	// A quota of another key does not match.
	_, _, ok := resolve(tbl, client{"dave", "x"}, ConsumerByteRate)
	require.False(t, ok)
}

// Names are chosen by clients (client ids) and operators: one holding the
// key's separators must not take another entity's quota or sensor.
func TestResolveNamesWithSeparators(t *testing.T) {
	q := func(v float64, cs ...Component) Entry { return entry(map[string]float64{ProducerByteRate: v}, cs...) }
	tbl := NewTable([]Entry{
		q(1, named(EntityUser, "a"), named(EntityClientID, "b")),
		q(2, named(EntityClientID, DefaultName)),
	})
	_, _, ok := resolve(tbl, client{"a,client-id=b", "x"}, ProducerByteRate)
	require.False(t, ok, "user \"a,client-id=b\" matched the quota of user a with client id b")
	ent, v, ok := resolve(tbl, client{"a", "b"}, ProducerByteRate)
	require.True(t, ok)
	require.Equal(t, 1.0, v)
	require.Equal(t, "user=a,client-id=b", ent)
	// A client id spelled like the default is a name, never the default.
	_, _, ok = resolve(tbl, client{"u", DefaultName}, ProducerByteRate)
	require.True(t, ok, "the client id named <default> has its own quota")
	_, _, ok = resolve(tbl, client{"u", "other"}, ProducerByteRate)
	require.False(t, ok, "a quota of the client id named <default> is not the default quota")
	require.NotEqual(t, EntityKey([]Component{{Type: EntityUser, Name: "a,client-id=b"}}),
		EntityKey([]Component{{Type: EntityUser, Name: "a"}, {Type: EntityClientID, Name: "b"}}))
}

func TestSensorSharing(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now})
	m.SetTable(NewTable([]Entry{
		entry(map[string]float64{ProducerByteRate: 1000}, named(EntityUser, "alice")),
		entry(map[string]float64{ProducerByteRate: 1000}, dflt(EntityUser)),
	}), 1)
	// alice's client ids share the user quota's sensor.
	require.Zero(t, m.RecordProduce("User:alice", "one", 600))
	require.NotZero(t, m.RecordProduce("User:alice", "two", 600))
	// A default user quota is per user: bob and carol each have their own.
	require.Zero(t, m.RecordProduce("User:bob", "one", 900))
	require.Zero(t, m.RecordProduce("User:carol", "one", 900))
	require.NotZero(t, m.RecordProduce("User:bob", "two", 200))
}

func TestSensorExpiry(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now, SensorExpiry: time.Minute})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 1000}, dflt(EntityClientID))}), 1)
	m.RecordProduce("User:x", "a", 1)
	m.RecordProduce("User:x", "b", 1)
	require.Equal(t, 2, m.sensorCount())
	clk.add(45 * time.Second)
	m.RecordProduce("User:x", "a", 1)
	clk.add(30 * time.Second) // b idle 75 s, a 30 s
	m.Sweep()
	require.Equal(t, 1, m.sensorCount())
	// A new client after the sweep gets a fresh sensor and its binding works.
	require.Zero(t, m.RecordProduce("User:x", "b", 1))
	require.Equal(t, 2, m.sensorCount())
}

func TestTableSwap(t *testing.T) {
	clk := newClock()
	m := NewManager(Options{Now: clk.now})
	require.Zero(t, m.RecordProduce("User:x", "a", 5000), "no table: no quota")
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 1000}, named(EntityClientID, "a"))}), 2)
	require.Zero(t, m.RecordProduce("User:x", "a", 500))
	// Raising the quota applies to the next request, keeping the rate
	// measured so far (500 bytes): 1500 total is within 2000/s.
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 2000}, named(EntityClientID, "a"))}), 3)
	require.Zero(t, m.RecordProduce("User:x", "a", 1000))
	// Lowering it throttles at once.
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 100}, named(EntityClientID, "a"))}), 4)
	require.Equal(t, m.MaxThrottle(), m.RecordProduce("User:x", "a", 1))
	require.Equal(t, 11*time.Second, m.MaxThrottle())
	// Removing it lifts the throttle.
	m.SetTable(NewTable(nil), 5)
	require.Zero(t, m.RecordProduce("User:x", "a", 1))
}

func TestValidateAndKey(t *testing.T) {
	ok := entry(map[string]float64{ProducerByteRate: 1}, dflt(EntityClientID), named(EntityUser, "a"))
	require.NoError(t, ok.Validate())
	require.Equal(t, "user=a,client-id=<default>", EntityKey(ok.Entity))
	require.NoError(t, entry(map[string]float64{ConnectionCreationRate: 5}, named(EntityIP, "10.0.0.1")).Validate())
	bad := []Entry{
		{},
		entry(map[string]float64{ProducerByteRate: 1}, named("topic", "x")),
		entry(map[string]float64{ProducerByteRate: 1}, named(EntityUser, "a"), named(EntityUser, "b")),
		entry(map[string]float64{ConnectionCreationRate: 1}, named(EntityIP, "1.2.3.4"), named(EntityUser, "a")),
		entry(map[string]float64{ProducerByteRate: 1}, named(EntityIP, "1.2.3.4")),
		entry(map[string]float64{ConnectionCreationRate: 1}, named(EntityIP, "not-an-ip")),
		entry(map[string]float64{ConnectionCreationRate: 1}, named(EntityUser, "a")),
		entry(map[string]float64{"bogus": 1}, named(EntityUser, "a")),
		entry(map[string]float64{ProducerByteRate: 0}, named(EntityUser, "a")),
		entry(map[string]float64{ProducerByteRate: 1}, Component{Type: EntityUser, Name: "a", Default: true}),
		entry(nil, named(EntityUser, "a")),
	}
	for _, e := range bad {
		require.Error(t, e.Validate(), "%+v", e)
	}
	// Invalid entries are left out of a table.
	require.Len(t, NewTable(append(bad, ok)).Entries(), 1)
}

// BenchmarkRecordProduce is the per-request cost of a client with a quota:
// a lookup and a sensor update, no allocation.
func BenchmarkRecordProduce(b *testing.B) {
	m := NewManager(Options{})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 1 << 40}, dflt(EntityClientID))}), 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RecordProduce("User:alice", "app", 1024)
		}
	})
}

func TestRecordDoesNotAllocate(t *testing.T) {
	m := NewManager(Options{})
	m.SetTable(NewTable([]Entry{entry(map[string]float64{ProducerByteRate: 1 << 40}, dflt(EntityClientID))}), 1)
	m.RecordProduce("User:alice", "app", 1) // the binding is built on first use
	require.Zero(t, testing.AllocsPerRun(100, func() {
		m.RecordProduce("User:alice", "app", 1024)
		m.RecordRequestTime("User:alice", "app", time.Millisecond)
	}))
}
