// Package faults serves sluiced's fault-injection endpoints
// (/debug/faults/*, see libs/verify/faultapi for the wire format) on the
// process's HTTP listener when it runs with --unsafe.fault-injection. The
// faults act on what the process was built with: the storage FaultFS
// shared by every log, the shifted clock its storage and replica lag
// decisions read, and the Links whose interceptors are on its role-to-role
// connections (link.go).
package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/libs/log"
	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/storage/vfs"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
)

// ExitCode is the status a crash exits with, as a process killed by SIGKILL
// reports it in a shell (128 + 9).
const ExitCode = 137

// maxBody bounds a request body: every valid one is tiny.
const maxBody = 64 << 10

// Deps are what the faults act on.
type Deps struct {
	// FS is the storage file system of every log of the process; nil in
	// a process without the storage-node role (disk, flip and crash's
	// drop_unsynced then answer 400).
	FS *vfs.FaultFS
	// Clock is the process's shifted clock.
	Clock *storage.ShiftedClock
	// Links are the link faults of the process's role-to-role
	// connections; nil when it has none (link then answers 400).
	Links *Links
	// ReplicaDir returns the log directory of this process's replica of a
	// partition; nil, or false, when it holds none.
	ReplicaDir func(topic string, partition int32) (string, bool)
	// Exit ends the process; nil means os.Exit.
	Exit   func(code int)
	Logger *slog.Logger
}

// Handler serves the endpoints.
type Handler struct {
	d Deps

	mu sync.Mutex
	// removes undo the active disk faults, for clear.
	removes []func()
}

// New returns a Handler.
func New(d Deps) *Handler {
	if d.Exit == nil {
		d.Exit = os.Exit
	}
	if d.Logger == nil {
		d.Logger = log.Discard()
	}
	if d.Clock == nil {
		d.Clock = storage.NewShiftedClock()
	}
	return &Handler{d: d}
}

// Register adds the endpoints to mux under faultapi.PathPrefix.
func (h *Handler) Register(mux *http.ServeMux) { mux.Handle(faultapi.PathPrefix, h) }

// badRequest is an error the caller made: answered 400.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func bad(format string, args ...any) error { return badRequest{fmt.Sprintf(format, args...)} }

// notFound is answered 404.
type notFound struct{ msg string }

func (e notFound) Error() string { return e.msg }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	action := strings.TrimPrefix(r.URL.Path, faultapi.PathPrefix)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer(w, http.StatusMethodNotAllowed, faultapi.Response{Error: fmt.Sprintf("%s: method %s not allowed, use POST", r.URL.Path, r.Method)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		answer(w, http.StatusBadRequest, faultapi.Response{Error: fmt.Sprintf("reading the body: %v", err)})
		return
	}
	var resp faultapi.Response
	switch action {
	case faultapi.ActionCrash:
		var req faultapi.CrashRequest
		if err = decode(body, &req); err == nil {
			err = h.crash(w, req)
			if err == nil {
				return // crash answered itself before exiting
			}
		}
	case faultapi.ActionDisk:
		var req faultapi.DiskRequest
		if err = decode(body, &req); err == nil {
			resp, err = h.disk(req)
		}
	case faultapi.ActionFlip:
		var req faultapi.FlipRequest
		if err = decode(body, &req); err == nil {
			resp, err = h.flip(req)
		}
	case faultapi.ActionClock:
		var req faultapi.ClockRequest
		if err = decode(body, &req); err == nil {
			resp, err = h.clock(req)
		}
	case faultapi.ActionLink:
		var req faultapi.LinkRequest
		if err = decode(body, &req); err == nil {
			resp, err = h.link(req)
		}
	case faultapi.ActionClear:
		if err = decodeEmpty(body); err == nil {
			resp = h.clear()
		}
	default:
		err = notFound{fmt.Sprintf("unknown fault action %q; one of crash, disk, flip, clock, link, clear", action)}
	}
	var br badRequest
	var nf notFound
	switch {
	case err == nil:
		resp.OK = true
		answer(w, http.StatusOK, resp)
	case errors.As(err, &br):
		answer(w, http.StatusBadRequest, faultapi.Response{Error: err.Error()})
	case errors.As(err, &nf):
		answer(w, http.StatusNotFound, faultapi.Response{Error: err.Error()})
	default:
		answer(w, http.StatusInternalServerError, faultapi.Response{Error: err.Error()})
	}
}

func answer(w http.ResponseWriter, status int, resp faultapi.Response) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp) // the caller may be gone; nothing to do then
}

// decode reads a JSON object into v, refusing unknown fields and trailing
// data so a misspelt field is an error, not a silently ignored setting.
func decode(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("body is not a valid JSON request: %v", err)
	}
	if dec.More() {
		return bad("body holds more than one JSON value")
	}
	return nil
}

func decodeEmpty(body []byte) error {
	var v struct{}
	return decode(body, &v)
}

func parseDuration(field, s string, allowNegative bool) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, bad("%s: %q is not a duration like \"200ms\" or \"5s\"", field, s)
	}
	if d < 0 && !allowNegative {
		return 0, bad("%s: %s is negative", field, s)
	}
	return d, nil
}

func (h *Handler) crash(w http.ResponseWriter, req faultapi.CrashRequest) error {
	if req.DropUnsynced {
		if h.d.FS == nil {
			return bad("drop_unsynced: this process has no storage (no storage-node role)")
		}
		// Every log handle fails from here on, so nothing syncs after the
		// cut.
		if err := h.d.FS.Crash(vfs.CrashOptions{}); err != nil {
			h.d.Logger.Error("fault injection: crash could not drop every unsynced byte", log.Err(err))
		}
	}
	h.d.Logger.Warn("fault injection: crashing", slog.Bool("drop_unsynced", req.DropUnsynced))
	answer(w, http.StatusOK, faultapi.Response{OK: true, Detail: fmt.Sprintf("exiting with status %d", ExitCode)})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	h.d.Exit(ExitCode)
	return nil
}

// ops maps faultapi.Ops to vfs operations.
var ops = map[string]vfs.Op{
	"open": vfs.OpOpen, "read": vfs.OpRead, "write": vfs.OpWrite, "sync": vfs.OpSync, "truncate": vfs.OpTruncate,
	"map": vfs.OpMap, "rename": vfs.OpRename, "remove": vfs.OpRemove, "syncdir": vfs.OpSyncDir, "mkdir": vfs.OpMkdir,
}

var errnos = map[string]error{"EIO": syscall.EIO, "ENOSPC": syscall.ENOSPC}

func (h *Handler) disk(req faultapi.DiskRequest) (faultapi.Response, error) {
	var resp faultapi.Response
	op, ok := ops[req.Op]
	if !ok {
		return resp, bad("op: %q is not one of %s", req.Op, strings.Join(faultapi.Ops, ", "))
	}
	var errno error
	if req.Error != "" {
		if errno, ok = errnos[req.Error]; !ok {
			return resp, bad("error: %q is not one of %s", req.Error, strings.Join(faultapi.Errors, ", "))
		}
	}
	latency, err := parseDuration("latency", req.Latency, false)
	if err != nil {
		return resp, err
	}
	if latency > time.Minute {
		return resp, bad("latency: %s is above 1m", latency)
	}
	duration, err := parseDuration("duration", req.Duration, false)
	if err != nil {
		return resp, err
	}
	if errno == nil && latency == 0 {
		return resp, bad("error or latency: a disk fault needs at least one")
	}
	if h.d.FS == nil {
		return resp, bad("disk: this process has no storage (no storage-node role)")
	}
	remove := h.d.FS.Inject(vfs.Fault{Op: op, PathContains: req.PathContains, Err: errno, Latency: latency})
	h.mu.Lock()
	h.removes = append(h.removes, remove)
	h.mu.Unlock()
	if duration > 0 {
		time.AfterFunc(duration, remove) // removing twice (after clear) does nothing
	}
	resp.Detail = fmt.Sprintf("%s on paths containing %q: error %q, latency %s, for %s", req.Op, req.PathContains, req.Error, latency, durationText(duration))
	h.d.Logger.Warn("fault injection: disk fault", slog.String("op", req.Op), slog.String("path_contains", req.PathContains),
		slog.String("error", req.Error), slog.Duration("latency", latency), slog.Duration("duration", duration))
	return resp, nil
}

func durationText(d time.Duration) string {
	if d == 0 {
		return "until clear"
	}
	return d.String()
}

func (h *Handler) flip(req faultapi.FlipRequest) (faultapi.Response, error) {
	var resp faultapi.Response
	if req.Topic == "" {
		return resp, bad("topic: required")
	}
	if req.Partition < 0 {
		return resp, bad("partition: %d is negative", req.Partition)
	}
	if h.d.FS == nil || h.d.ReplicaDir == nil {
		return resp, bad("flip: this process has no storage (no storage-node role)")
	}
	dir, ok := h.d.ReplicaDir(req.Topic, req.Partition)
	if !ok {
		return resp, notFound{fmt.Sprintf("this process holds no replica of %s-%d", req.Topic, req.Partition)}
	}
	path, off, err := newestDataByte(dir)
	if err != nil {
		return resp, err
	}
	const bit = 0
	if err := h.d.FS.FlipBit(path, off, bit); err != nil {
		return resp, fmt.Errorf("flipping bit %d of byte %d of %s: %w", bit, off, path, err)
	}
	h.d.Logger.Warn("fault injection: flipped a bit", slog.String("path", path), slog.Int64("file_offset", off))
	resp.Path, resp.FileOffset, resp.Bit = path, off, bit
	resp.Detail = fmt.Sprintf("flipped bit %d of byte %d of %s", bit, off, path)
	return resp, nil
}

// newestDataByte picks the last byte of the newest non-empty segment file
// in dir: the last byte of its last batch's last record, which the batch's
// CRC covers.
func newestDataByte(dir string) (string, int64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return "", 0, err
	}
	sort.Strings(names) // base offsets in 20 digits sort as numbers
	for _, name := range slices.Backward(names) {
		fi, err := os.Stat(name)
		if err != nil {
			continue // removed meanwhile (retention); try an older one
		}
		if fi.Size() > 0 {
			return name, fi.Size() - 1, nil
		}
	}
	return "", 0, notFound{fmt.Sprintf("no segment of %s holds data yet", filepath.Base(dir))}
}

func (h *Handler) clock(req faultapi.ClockRequest) (faultapi.Response, error) {
	var resp faultapi.Response
	if req.Offset == "" {
		return resp, bad("offset: required, a duration like \"-30s\" (\"0s\" undoes the shift)")
	}
	d, err := parseDuration("offset", req.Offset, true)
	if err != nil {
		return resp, err
	}
	if d > 24*time.Hour || d < -24*time.Hour {
		return resp, bad("offset: %s is beyond ±24h", d)
	}
	h.d.Clock.SetOffset(d)
	h.d.Logger.Warn("fault injection: clock shifted", slog.Duration("offset", d))
	resp.ClockOffset = d.String()
	resp.Detail = fmt.Sprintf("clock set to the wall clock %+v", d)
	return resp, nil
}

func (h *Handler) clear() faultapi.Response {
	h.mu.Lock()
	removes := h.removes
	h.removes = nil
	h.mu.Unlock()
	for _, r := range removes {
		r()
	}
	if h.d.FS != nil {
		h.d.FS.ClearFaults()
	}
	links := 0
	var delayed, duplicated int64
	if h.d.Links != nil {
		links = h.d.Links.Clear()
		delayed, duplicated = h.d.Links.Counts()
	}
	h.d.Clock.SetOffset(0)
	h.d.Logger.Warn("fault injection: every fault cleared",
		slog.Int64("link_messages_delayed_total", delayed), slog.Int64("link_requests_duplicated_total", duplicated))
	return faultapi.Response{Detail: fmt.Sprintf("removed %d disk fault(s) and %d link fault(s); clock offset 0", len(removes), links), ClockOffset: "0s"}
}

// maxLinkDelay bounds a link fault's delay and jitter: longer is a
// partition, which network namespaces do better.
const maxLinkDelay = time.Minute

func (h *Handler) link(req faultapi.LinkRequest) (faultapi.Response, error) {
	var resp faultapi.Response
	if req.Peer == "" {
		return resp, bad("peer: required, the address (host:port) this process dials, or %q for every peer", faultapi.AnyPeer)
	}
	if req.Peer != faultapi.AnyPeer {
		host, port, err := net.SplitHostPort(req.Peer)
		if p, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || p == 0 {
			return resp, bad("peer: %q is not host:port (or %q for every peer)", req.Peer, faultapi.AnyPeer)
		}
	}
	delay, err := parseDuration("delay", req.Delay, false)
	if err != nil {
		return resp, err
	}
	jitter, err := parseDuration("jitter", req.Jitter, false)
	if err != nil {
		return resp, err
	}
	if delay > maxLinkDelay || jitter > maxLinkDelay {
		return resp, bad("delay and jitter: at most %s each (got %s and %s)", maxLinkDelay, delay, jitter)
	}
	if req.Duplicate < 0 || req.Duplicate > 1 || math.IsNaN(req.Duplicate) {
		return resp, bad("duplicate: %v is not a probability between 0 and 1", req.Duplicate)
	}
	if delay == 0 && jitter == 0 && req.Duplicate == 0 {
		return resp, bad("delay, jitter or duplicate: a link fault needs at least one")
	}
	duration, err := parseDuration("duration", req.Duration, false)
	if err != nil {
		return resp, err
	}
	if h.d.Links == nil {
		return resp, bad("link: this process has no role-to-role connections to slow down")
	}
	remove := h.d.Links.Add(LinkRule{Peer: req.Peer, MethodContains: req.MethodContains, Delay: delay, Jitter: jitter, Duplicate: req.Duplicate})
	if duration > 0 {
		time.AfterFunc(duration, remove) // removing twice (after clear) does nothing
	}
	resp.Detail = fmt.Sprintf("calls to %s on methods containing %q: delay %s + up to %s per message, unary requests sent twice with probability %v, for %s",
		req.Peer, req.MethodContains, delay, jitter, req.Duplicate, durationText(duration))
	h.d.Logger.Warn("fault injection: link fault", slog.String("peer", req.Peer), slog.String("method_contains", req.MethodContains),
		slog.Duration("delay", delay), slog.Duration("jitter", jitter), slog.Float64("duplicate", req.Duplicate), slog.Duration("duration", duration))
	return resp, nil
}
