package verify

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/libs/client"
	"github.com/sluice-io/sluice/libs/client/errs"
	"github.com/sluice-io/sluice/libs/verify/check"
)

func TestOutcomeOf(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want check.Outcome
	}{
		{"nil", nil, check.OK},
		{"producer closed", client.ErrProducerClosed, check.Fail},
		{"invalid request", errs.New(errs.InvalidRequest, "bad"), check.Fail},
		{"record too large, wrapped", fmt.Errorf("produce: %w", errs.New(errs.MessageTooLarge, "big")), check.Fail},
		{"sdk state error", errs.New(errs.InvalidTxnState, "no open transaction"), check.Fail},
		{"timeout", errs.New(errs.RequestTimedOut, "slow"), check.Info},
		{"not leader (a retry of a timed-out send)", errs.New(errs.NotLeaderOrFollower, "moved"), check.Info},
		{"not enough replicas", errs.New(errs.NotEnoughReplicas, "isr"), check.Info},
		{"fenced", errs.New(errs.ProducerFenced, "fenced"), check.Info},
		{"deadline", context.DeadlineExceeded, check.Info},
		{"canceled", context.Canceled, check.Info},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), check.Info},
		{"other", errors.New("boom"), check.Info},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, outcomeOf(c.err))
		})
	}
}

func TestPacer(t *testing.T) {
	p := newPacer(10) // every 100 ms
	t0 := p.next
	require.Equal(t, 1, p.due(t0))
	require.Equal(t, 0, p.due(t0.Add(50*time.Millisecond)))
	require.Equal(t, 3, p.due(t0.Add(320*time.Millisecond)))
	// A long stall catches up by at most a second's worth.
	require.LessOrEqual(t, p.due(t0.Add(time.Minute)), 11)
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	cfg, err := Config{Bootstrap: []string{"a:1"}, Duration: time.Second, Seed: 7}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 3, cfg.Topics)
	require.Equal(t, int32(3), cfg.Partitions)
	require.Equal(t, Producers{Plain: 1, Idempotent: 2, Transactional: 2}, cfg.Producers)
	require.Equal(t, Consumers{AssignCommitted: 1, AssignUncommitted: 1, ClassicGroup: 2, ConsumerGroup: 2}, cfg.Consumers)
	require.Equal(t, "all", cfg.Acks)
	require.Equal(t, 500, cfg.Rate)
	require.Equal(t, "verify-7-", cfg.TopicPrefix)

	_, err = Config{}.withDefaults()
	require.ErrorContains(t, err, "Bootstrap")
	require.ErrorContains(t, err, "Duration")
	_, err = Config{Bootstrap: []string{"a:1"}, Duration: time.Second, Acks: "most", Rate: -1,
		Producers: Producers{Plain: -1}}.withDefaults()
	require.ErrorContains(t, err, "Acks")
	require.ErrorContains(t, err, "Rate")
	require.ErrorContains(t, err, "Producers")
}

// Acks takes Kafka's spellings and applies to plain producers only; topic
// configs are checked against the known topic configs.
func TestConfigAcksAndTopicConfigs(t *testing.T) {
	for in, want := range map[string]string{"": "all", "all": "all", "-1": "all", "1": "1", "leader": "1", "0": "0", "none": "0"} {
		cfg, err := Config{Bootstrap: []string{"a:1"}, Duration: time.Second, Acks: in}.withDefaults()
		require.NoError(t, err, in)
		require.Equal(t, want, cfg.Acks, in)
	}
	require.Equal(t, client.AcksLeader, acksOf("1", false))
	require.Equal(t, client.AcksNone, acksOf("0", false))
	require.Equal(t, client.AcksAll, acksOf("all", false))
	require.Equal(t, client.AcksAll, acksOf("1", true), "idempotent producers need acks=all")

	_, err := Config{Bootstrap: []string{"a:1"}, Duration: time.Second, TopicConfigs: map[string]string{
		"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}}.withDefaults()
	require.NoError(t, err)
	_, err = Config{Bootstrap: []string{"a:1"}, Duration: time.Second, TopicConfigs: map[string]string{
		"unclean.leader.election.enabled": "true", "min.insync.replicas": "zero"}}.withDefaults()
	require.ErrorContains(t, err, "TopicConfigs")
	require.ErrorContains(t, err, "unclean.leader.election.enabled: unknown topic config")
	require.ErrorContains(t, err, "min.insync.replicas")
}

// sampleHistory is a small valid history: two plain sends, one committed
// and one aborted transaction, one info send, reads of the committed
// values, and a fault.
func sampleHistory(t0 int64) check.History {
	s := int64(time.Second)
	return check.History{
		Txns: []check.Txn{
			{Process: 1, Start: t0, CommitStart: t0, End: t0 + 10e6, Commit: true, Outcome: check.OK,
				Sends: []check.Send{{Topic: "a", Partition: 0, Key: "k1", Value: "1-1", Acked: true, Offset: 0}}},
			{Process: 1, Start: t0 + s, CommitStart: t0 + s, End: t0 + s + 30e6, Commit: true, Outcome: check.Info, Idempotent: true,
				Sends: []check.Send{{Topic: "a", Partition: 0, Key: "k2", Value: "1-2", Offset: check.NoOffset}}},
			{Process: 2, Start: t0 + 2*s, CommitStart: t0 + 2*s + 5e6, End: t0 + 2*s + 20e6, Commit: true, Outcome: check.OK,
				TransactionalID: "tx", Idempotent: true, Epoch: 0,
				Sends: []check.Send{{Topic: "a", Partition: 1, Key: "k3", Value: "2-1", Acked: true, Offset: 0},
					{Topic: "a", Partition: 0, Key: "k4", Value: "2-2", Acked: true, Offset: 1}}},
			{Process: 2, Start: t0 + 3*s, CommitStart: t0 + 3*s + 5e6, End: t0 + 3*s + 9e6, Commit: false, Outcome: check.OK,
				TransactionalID: "tx", Idempotent: true, Epoch: 1,
				Sends: []check.Send{{Topic: "a", Partition: 1, Key: "k5", Value: "2-3", Acked: true, Offset: 1}}},
		},
		Inits: []check.Init{{Process: 2, TransactionalID: "tx", Start: t0, End: t0 + 1e6, ProducerID: 4, Epoch: 0, Outcome: check.OK}},
		Polls: []check.Poll{{Process: 3, Start: t0 + 4*s, End: t0 + 4*s + 1e6, Isolation: check.ReadCommitted,
			Seeks: []check.Position{{Topic: "a", Partition: 0, Offset: 0}, {Topic: "a", Partition: 1, Offset: 0}},
			Reads: []check.Read{{Topic: "a", Partition: 0, Offset: 0, Key: "k1", Value: "1-1"},
				{Topic: "a", Partition: 0, Offset: 1, Key: "k4", Value: "2-2"},
				{Topic: "a", Partition: 1, Offset: 0, Key: "k3", Value: "2-1"}},
			Ends:  []check.Position{{Topic: "a", Partition: 0, Offset: 2}, {Topic: "a", Partition: 1, Offset: 3}},
			Final: true}},
		Faults: []check.Fault{{Kind: "kill", Target: "storage-1", Detail: "SIGKILL", Start: t0 + s, End: t0 + 2*s},
			{Kind: "clock", Target: "controller-0", Detail: "-30s", Start: t0 + 3*s}},
	}
}

func TestReportCountsAndSummary(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	h := sampleHistory(t0)
	rep, err := checkHistory(h, 42, time.Unix(0, t0), time.Unix(0, t0+4e9))
	require.NoError(t, err)
	require.True(t, rep.Valid(), rep.Result.String())
	require.Equal(t, OpCounts{OK: 1}, rep.Ops[OpProducePlain])
	require.Equal(t, OpCounts{Info: 1}, rep.Ops[OpProduceIdempotent])
	require.Equal(t, OpCounts{OK: 2}, rep.Ops[OpTxn])
	require.Equal(t, OpCounts{OK: 1}, rep.Ops[OpInit])
	require.NotContains(t, rep.Ops, OpPoll, "final reads are not workload polls")
	require.Equal(t, 2, rep.Latency[OpTxn].Count)
	require.InDelta(t, 10, rep.Latency[OpProducePlain].P50, 0.01)
	// 1 + 2 + 1 records of writes that ended OK, over 4 s.
	require.InDelta(t, 1.0, rep.Throughput, 0.001)

	sum := rep.Summary()
	lines := strings.Split(sum, "\n")
	require.Equal(t, "VALID", lines[0])
	require.Contains(t, sum, "seed 42")
	require.Contains(t, sum, "+1.0s kill storage-1 for 1s (SIGKILL)")
	require.Regexp(t, `txn\s+2\s+0\s+0`, sum)
}

func TestReportVerdictNamesAnomalies(t *testing.T) {
	t0 := time.Now().UnixNano()
	h := sampleHistory(t0)
	// A read_committed read of the aborted transaction's value.
	h.Polls = append(h.Polls, check.Poll{Process: 4, Start: t0 + 5e9, End: t0 + 5e9 + 1, Isolation: check.ReadCommitted,
		Seeks: []check.Position{{Topic: "a", Partition: 1, Offset: 1}},
		Reads: []check.Read{{Topic: "a", Partition: 1, Offset: 1, Key: "k5", Value: "2-3"}}})
	rep, err := checkHistory(h, 1, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.False(t, rep.Valid())
	require.Regexp(t, `^INVALID: \d+ anomal(y|ies) \(.*aborted-read.*\)$`, rep.Verdict())
	require.True(t, strings.HasPrefix(rep.Summary(), rep.Verdict()+"\n"))
}

func TestReportFilesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().UnixNano()
	h := sampleHistory(t0)
	rep, err := checkHistory(h, 9, time.Unix(0, t0), time.Unix(0, t0+4e9))
	require.NoError(t, err)
	require.NoError(t, rep.write(dir, h))
	for _, f := range []string{SummaryFile, ResultFile, HistoryFile, TimelineFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		require.NotZero(t, st.Size(), f)
	}
	require.Equal(t, filepath.Join(dir, HistoryFile), rep.Files.History)

	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "VALID\n"))

	var back map[string]any
	b, err = os.ReadFile(filepath.Join(dir, ResultFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	require.EqualValues(t, 9, back["seed"])
	require.Contains(t, back, "ops")
	require.Contains(t, back, "result")

	// The saved history checks the same way (--check-only).
	f, err := os.Open(filepath.Join(dir, HistoryFile))
	require.NoError(t, err)
	defer f.Close()
	h2, err := check.ReadHistory(f)
	require.NoError(t, err)
	out := filepath.Join(dir, "recheck")
	rep2, err := CheckHistory(h2, out)
	require.NoError(t, err)
	require.Equal(t, rep.Verdict(), rep2.Verdict())
	require.Equal(t, rep.Ops, rep2.Ops)
	require.FileExists(t, filepath.Join(out, SummaryFile))
	require.NoFileExists(t, filepath.Join(out, HistoryFile))
}

func TestCopyValueInput(t *testing.T) {
	require.Equal(t, "3-17", copyValueInput("5.9:3-17"))
	require.Equal(t, "3-17", copyValueInput("3-17"))
}

// svgDoc is the part of an SVG document the plot test looks at.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Rects   []struct {
		Fill  string `xml:"fill,attr"`
		Title string `xml:"title"`
	} `xml:"rect"`
	Texts []string `xml:"text"`
	Paths []struct {
		D string `xml:"d,attr"`
	} `xml:"path"`
}

func TestTimelineSVG(t *testing.T) {
	t0 := time.Now().UnixNano()
	h := sampleHistory(t0)
	// A fault whose label needs escaping.
	h.Faults = append(h.Faults, check.Fault{Kind: "partition", Target: "a<b & c", Start: t0 + 2e9, End: t0 + 3e9})
	var b strings.Builder
	require.NoError(t, writeTimeline(&b, h, time.Unix(0, t0)))
	if p := os.Getenv("VERIFY_SVG_OUT"); p != "" {
		require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	}
	var doc svgDoc
	require.NoError(t, xml.Unmarshal([]byte(b.String()), &doc), "the timeline is well-formed XML")
	bands, bars := 0, map[string]int{}
	for _, r := range doc.Rects {
		switch {
		case r.Title != "":
			bands++
		case r.Fill == "#2a9d8f" || r.Fill == "#e9c46a" || r.Fill == "#e63946":
			bars[r.Fill]++
		}
	}
	require.Equal(t, 3, bands, "one band per fault")
	require.Contains(t, doc.Texts, "kill storage-1")
	require.Contains(t, doc.Texts, "clock controller-0")
	require.Contains(t, doc.Texts, "partition a<b & c")
	// Seconds 0 (plain ok), 2 and 3 (txns ok) have ok bars, plus the
	// legend swatch; second 1 has the info send.
	require.Equal(t, 4, bars["#2a9d8f"])
	require.Equal(t, 2, bars["#e9c46a"])
	require.Len(t, doc.Paths, 2)
	// Second 1 has no OK write: the line breaks there (0 | 2-3).
	require.Regexp(t, `^M[\d.,]+ M[\d.,]+ L[\d.,]+ $`, doc.Paths[0].D)
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 1: 1, 3: 4, 7: 10, 1196: 2000, 110: 200, 0.3: 0.4, 45: 50} {
		require.InDelta(t, want, niceCeil(in), 1e-9, "niceCeil(%v)", in)
	}
}

func TestTimelineEmptyHistory(t *testing.T) {
	var b strings.Builder
	require.NoError(t, writeTimeline(&b, check.History{}, time.Time{}))
	require.NoError(t, xml.Unmarshal([]byte(b.String()), new(svgDoc)))
}

func TestTimelineWriteError(t *testing.T) {
	require.Error(t, writeTimeline(failWriter{}, sampleHistory(time.Now().UnixNano()), time.Time{}))
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// A fault near the end of the run keeps its label inside the image.
func TestTimelineLabelStaysInside(t *testing.T) {
	t0 := time.Now().UnixNano()
	h := sampleHistory(t0)
	h.Faults = append(h.Faults, check.Fault{Kind: "partition", Target: "storage-leader-with-a-long-name", Start: t0 + 4e9, End: t0 + 4.5e9})
	var b strings.Builder
	require.NoError(t, writeTimeline(&b, h, time.Unix(0, t0)))
	var doc struct {
		Texts []struct {
			X    float64 `xml:"x,attr"`
			Text string  `xml:",chardata"`
		} `xml:"text"`
	}
	require.NoError(t, xml.Unmarshal([]byte(b.String()), &doc))
	found := false
	for _, tx := range doc.Texts {
		if strings.HasPrefix(tx.Text, "partition storage-leader") {
			found = true
			require.LessOrEqual(t, tx.X+6.2*float64(len(tx.Text)), float64(plotW), "label %q at x=%.1f runs past the %d px image", tx.Text, tx.X, plotW)
		}
	}
	require.True(t, found)
}
