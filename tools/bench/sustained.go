package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The sustained block produces N GiB of 1 KiB records into one topic on a
// fresh sluiced, one `sluice perf produce` of 1 GiB after another with
// nothing deleted and no cache dropped in between, so each GiB lands on the
// data (and page cache) the earlier ones left. The server's CPU times are
// read from /proc/<pid>/stat between the invocations: each GiB is a slice
// with its own rate and CPU. It runs once, after the rounds, for two
// durabilities, each on a server of its own.

// sustainedSliceRecords is one GiB of 1 KiB records.
const sustainedSliceRecords = 1 << 20

type sustainedVariant struct {
	id, label string
	args      []string // what differs from `sluice perf produce`'s defaults
}

var sustainedVariants = []sustainedVariant{
	{"sustained.acks1", "defaults + acks=1, no fsync", []string{"--acks", "1", "--topic-config", "sluice.fsync.before.ack=false"}},
	{"sustained.fsync", "defaults (acks=all, fsync before ack)", nil},
}

// sustainedRun is one variant's slices.
type sustainedRun struct {
	ID      string           `json:"id"`
	Label   string           `json:"label"`
	Command string           `json:"command"` // the first slice's; every slice runs the same
	Slices  []sustainedSlice `json:"slices"`
	Error   string           `json:"error,omitempty"`
}

// sustainedSlice is one GiB of a sustained run.
type sustainedSlice struct {
	GiB    int     `json:"gib"`      // 1 for the first
	MBPerS float64 `json:"mb_per_s"` // sluice perf's own figure
	// WallS is the time between the two reads of the server's CPU (the
	// command's whole run, start-up included).
	WallS       float64 `json:"wall_s"`
	ServerUserS float64 `json:"server_user_s"`
	ServerSysS  float64 `json:"server_sys_s"`
	// SysPct is the server's system CPU over WallS, in percent of one core.
	SysPct   float64 `json:"server_sys_pct"`
	CPUPerGB float64 `json:"server_cpu_s_per_gb"`
}

// cpuMark is a server's CPU times at a slice boundary.
type cpuMark struct {
	at           time.Time
	utime, stime uint64 // clock ticks
	ticks        float64
}

func markCPU(pid int) (cpuMark, error) {
	st, err := readStat(pid)
	if err != nil {
		return cpuMark{}, fmt.Errorf("reading the server's CPU times: %w", err)
	}
	return cpuMark{at: time.Now(), utime: st.utime, stime: st.stime, ticks: st.clockTicks}, nil
}

// sliceBetween is the slice from a to b that moved bytes, at the rate the
// producer reported.
func sliceBetween(gib int, a, b cpuMark, bytes int64, mbPerS float64) sustainedSlice {
	s := sustainedSlice{GiB: gib, MBPerS: mbPerS, WallS: b.at.Sub(a.at).Seconds(),
		ServerUserS: float64(b.utime-a.utime) / b.ticks, ServerSysS: float64(b.stime-a.stime) / b.ticks}
	if s.WallS > 0 {
		s.SysPct = 100 * s.ServerSysS / s.WallS
	}
	if bytes > 0 {
		s.CPUPerGB = (s.ServerUserS + s.ServerSysS) / (float64(bytes) / 1e9)
	}
	return s
}

// lastOverFirst is the last slice's rate over the first's; it needs two.
func lastOverFirst(slices []sustainedSlice) (float64, bool) {
	if len(slices) < 2 || slices[0].MBPerS <= 0 {
		return 0, false
	}
	return slices[len(slices)-1].MBPerS / slices[0].MBPerS, true
}

// sustainedSize shrinks the wanted GiB to what free bytes allow: 2 GiB per
// GiB produced (the log and the page cache's writeback may lag) and 5 GiB
// to spare. It says why when it shrinks.
func sustainedSize(want int, free uint64) (int, string) {
	if want <= 0 {
		return 0, ""
	}
	freeGiB := int(free >> 30)
	if freeGiB >= 2*want+5 {
		return want, ""
	}
	n := max((freeGiB-5)/2, 0)
	return n, fmt.Sprintf("%d GiB asked for, %d GiB run: the disk had %d GiB free and the block wants 2 GiB per GiB produced and 5 to spare", want, n, freeGiB)
}

func (h *harness) sustainedBlock(ctx context.Context) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(h.tmp, &st); err != nil {
		h.sustainedNote = "not run: " + err.Error()
		return
	}
	n, note := sustainedSize(h.cfg.sustainedGiB, st.Bavail*uint64(st.Bsize))
	h.sustainedGiB, h.sustainedNote = n, note
	if note != "" {
		h.logf("sustained: %s", note)
	}
	if n == 0 {
		return
	}
	for _, v := range sustainedVariants {
		if ctx.Err() != nil {
			return
		}
		// Each run starts from the state every other block starts from;
		// from then on the data piles up.
		h.dropCaches()
		h.sustained = append(h.sustained, h.sustainedRun(ctx, v, n))
	}
}

func (h *harness) sustainedRun(ctx context.Context, v sustainedVariant, n int) sustainedRun {
	run := sustainedRun{ID: v.id, Label: v.label}
	srv, addr, err := h.startSluiced(ctx, "sluiced-"+strings.TrimPrefix(v.id, "sustained."))
	if err != nil {
		run.Error = err.Error()
		h.logf("%-24s FAILED: %v", v.id, err)
		return run
	}
	defer h.stopSluiced(srv)
	pid := srv.cmd.Process.Pid
	syscall.Sync()
	h.idle.wait(ctx) // before the first GiB only: the point is to keep producing
	prev, err := markCPU(pid)
	for i := 1; i <= n && err == nil; i++ {
		argv := h.perfArgv(addr, append([]string{"produce", "--topic", "sustained", "--partitions", strconv.Itoa(h.cfg.partitions),
			"--replication-factor", "1", "--num-records", strconv.Itoa(sustainedSliceRecords), "--record-size", "1024"}, v.args...)...)
		if i == 1 {
			run.Command = h.display(argv)
		}
		var res runResult
		res, err = runCommand(ctx, filepath.Join(h.tmp, fmt.Sprintf("%s-%d.log", v.id, i)), 5*time.Minute, argv)
		var f figures
		if err == nil {
			f, err = parseFigures(res.stdout, true)
		}
		var cur cpuMark
		if err == nil {
			cur, err = markCPU(pid)
		}
		if err != nil {
			if d := srv.died(); d != "" {
				err = fmt.Errorf("%s\n---\n%w", d, err)
			}
			break
		}
		s := sliceBetween(i, prev, cur, sustainedSliceRecords*1024, f["mb_per_s"])
		run.Slices = append(run.Slices, s)
		prev = cur
		h.logf("%-24s GiB %d: %.4g MB/s, server sys %.0f%% of a core, %.3g CPU s/GB", v.id, i, s.MBPerS, s.SysPct, s.CPUPerGB)
	}
	if err != nil {
		run.Error = err.Error()
		h.logf("%-24s FAILED: %v", v.id, err)
	}
	return run
}

// sustainedMarkdown renders the sustained runs side by side, a row per GiB.
func sustainedMarkdown(runs []sustainedRun, gib int, note string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("\n## Sustained rate\n\n")
	if note != "" {
		w("%s.\n\n", note)
	}
	if len(runs) == 0 {
		w("Not run.\n")
		return b.String()
	}
	w("%d GiB of 1 KiB records into one topic on a fresh sluiced per durability, a `sluice perf produce` of 1 GiB after another, ", gib)
	w("nothing deleted and no cache dropped in between. MB/s is the producer's own figure for its GiB; the server's CPU comes from ")
	w("/proc/<pid>/stat read between the commands (sys %% is system CPU over the wall time, in percent of one core).\n\n")
	w("| GiB |")
	for _, r := range runs {
		w(" %s: MB/s | sys %% | CPU s/GB |", r.Label)
	}
	w("\n|---|")
	for range runs {
		w("---|---|---|")
	}
	w("\n")
	rows := 0
	for _, r := range runs {
		rows = max(rows, len(r.Slices))
	}
	for i := range rows {
		w("| %d |", i+1)
		for _, r := range runs {
			if i < len(r.Slices) {
				s := r.Slices[i]
				w(" %s | %.0f | %s |", num(s.MBPerS), s.SysPct, num(s.CPUPerGB))
			} else {
				w(" - | - | - |")
			}
		}
		w("\n")
	}
	w("| last / first |")
	for _, r := range runs {
		if x, ok := lastOverFirst(r.Slices); ok {
			w(" %.2fx | | |", x)
		} else {
			w(" - | | |")
		}
	}
	w("\n")
	for _, r := range runs {
		if r.Error != "" {
			w("\n%s failed after %d GiB: %s\n", r.ID, len(r.Slices), firstLine(r.Error))
		}
	}
	w("\n```\n")
	for _, r := range runs {
		w("# %s (%d times)\n%s\n", r.ID, gib, r.Command)
	}
	w("```\n")
	return b.String()
}
