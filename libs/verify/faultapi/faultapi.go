// Package faultapi is the client of sluiced's fault-injection endpoints,
// served on a process's HTTP listener (--http-listen) only when it runs with
// --unsafe.fault-injection:
//
//	POST /debug/faults/crash  {"drop_unsynced": true}
//	POST /debug/faults/disk   {"op": "sync", "path_contains": ".log", "error": "EIO", "latency": "200ms", "duration": "5s"}
//	POST /debug/faults/flip   {"topic": "t", "partition": 0}
//	POST /debug/faults/clock  {"offset": "-30s"}
//	POST /debug/faults/link   {"peer": "10.0.0.2:7001", "delay": "100ms", "jitter": "50ms", "duplicate": 0.5, "duration": "5s"}
//	POST /debug/faults/clear  {}
//
// Every answer is a JSON Response; bad input is 400 with Response.Error
// saying what is wrong, an unknown action 404, a partition this process
// holds no replica of 404, a process without the flag 404 (the paths are
// not served).
//
// The types here are the wire format; the server decodes into them too.
package faultapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// PathPrefix is where the endpoints are served.
const PathPrefix = "/debug/faults/"

// The actions, as the last element of the path.
const (
	ActionCrash = "crash"
	ActionDisk  = "disk"
	ActionFlip  = "flip"
	ActionClock = "clock"
	ActionLink  = "link"
	ActionClear = "clear"
)

// Ops are the file system operations a disk fault can target.
var Ops = []string{"open", "read", "write", "sync", "truncate", "map", "rename", "remove", "syncdir", "mkdir"}

// Errors are the error names a disk fault can return.
var Errors = []string{"EIO", "ENOSPC"}

// CrashRequest is the body of crash. With DropUnsynced the process first
// loses every byte its storage wrote but did not fsync (a power cut); it
// then exits at once with status 137, as after SIGKILL, without any clean
// shutdown.
type CrashRequest struct {
	DropUnsynced bool `json:"drop_unsynced"`
}

// DiskRequest is the body of disk: operations Op on files whose path
// contains PathContains ("" = every file) wait Latency and then fail with
// Error (one of Errors; "" = do not fail, only slow down). At least one of
// Error and Latency is required. The fault lasts Duration ("" or "0s" =
// until clear). Durations are Go duration strings ("200ms", "5s").
type DiskRequest struct {
	Op           string `json:"op"`
	PathContains string `json:"path_contains,omitempty"`
	Error        string `json:"error,omitempty"`
	Latency      string `json:"latency,omitempty"`
	Duration     string `json:"duration,omitempty"`
}

// FlipRequest is the body of flip: one bit of the newest record batch in
// the replica's newest non-empty segment file is flipped on disk (so the
// batch's CRC no longer matches).
type FlipRequest struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// ClockRequest is the body of clock: the process's fault clock is set to
// the wall clock plus Offset (a Go duration string, may be negative;
// "0s" undoes it). Offsets do not add up: each request sets the offset.
type ClockRequest struct {
	Offset string `json:"offset"`
}

// AnyPeer is the LinkRequest.Peer that matches every peer.
const AnyPeer = "*"

// LinkRequest is the body of link: the gRPC calls this process makes to
// other Sluice processes (its role-to-role connections, not the calls it
// serves, nor the Kafka listener) to Peer (an address as the process dials
// it, host:port, or AnyPeer), on methods whose full name contains
// MethodContains ("" = every method), are slowed down and duplicated:
//
//   - every message crossing such a call waits Delay plus a uniform draw
//     in [0, Jitter): a unary request before it is sent and its answer
//     once it arrived; a stream's opening, each message it sends and each
//     message it receives, including on streams opened before the fault;
//   - with probability Duplicate (0 to 1) a unary request is sent a second
//     time once the first was answered (the copy waits the delay too, and
//     its answer is dropped: the caller sees one answer). Stream messages
//     are not duplicated.
//
// At least one of Delay, Jitter and Duplicate is required; Delay and Jitter
// are at most 1m. The fault lasts Duration ("" = until clear). Link faults
// add up: a call matched by several waits the sum of their delays.
type LinkRequest struct {
	Peer           string  `json:"peer"`
	MethodContains string  `json:"method_contains,omitempty"`
	Delay          string  `json:"delay,omitempty"`
	Jitter         string  `json:"jitter,omitempty"`
	Duplicate      float64 `json:"duplicate,omitempty"`
	Duration       string  `json:"duration,omitempty"`
}

// Response is every answer.
type Response struct {
	// OK is true when the fault is in place.
	OK bool `json:"ok"`
	// Error says what was wrong with the request when OK is false.
	Error string `json:"error,omitempty"`
	// Detail describes what was done, for logs.
	Detail string `json:"detail,omitempty"`
	// Path, FileOffset and Bit say which bit flip flipped.
	Path       string `json:"path,omitempty"`
	FileOffset int64  `json:"file_offset,omitempty"`
	Bit        int    `json:"bit,omitempty"`
	// ClockOffset is the clock's offset after clock or clear.
	ClockOffset string `json:"clock_offset,omitempty"`
}

// DiskFault is a disk fault for Client.Disk (see DiskRequest).
type DiskFault struct {
	// Op is one of Ops.
	Op string
	// PathContains restricts the fault to paths containing it.
	PathContains string
	// Error is one of Errors, or "" to only add Latency.
	Error string
	// Latency delays each matching operation.
	Latency time.Duration
	// Duration is how long the fault lasts; 0 means until Clear.
	Duration time.Duration
}

// Request returns the wire form of f.
func (f DiskFault) Request() DiskRequest {
	r := DiskRequest{Op: f.Op, PathContains: f.PathContains, Error: f.Error}
	if f.Latency != 0 {
		r.Latency = f.Latency.String()
	}
	if f.Duration != 0 {
		r.Duration = f.Duration.String()
	}
	return r
}

// LinkFault is a link fault for Client.Link (see LinkRequest).
type LinkFault struct {
	// Peer is the address (host:port) the process dials, or AnyPeer.
	Peer string
	// MethodContains restricts the fault to methods whose full name
	// ("/sluice.replication.v1.ReplicationService/FollowerFetch") contains
	// it.
	MethodContains string
	// Delay and Jitter: each message waits Delay plus up to Jitter.
	Delay, Jitter time.Duration
	// Duplicate is the probability that a unary request is sent twice.
	Duplicate float64
	// Duration is how long the fault lasts; 0 means until Clear.
	Duration time.Duration
}

// Request returns the wire form of f.
func (f LinkFault) Request() LinkRequest {
	r := LinkRequest{Peer: f.Peer, MethodContains: f.MethodContains, Duplicate: f.Duplicate}
	if f.Delay != 0 {
		r.Delay = f.Delay.String()
	}
	if f.Jitter != 0 {
		r.Jitter = f.Jitter.String()
	}
	if f.Duration != 0 {
		r.Duration = f.Duration.String()
	}
	return r
}

// Client calls one process's fault endpoints.
type Client struct {
	// HTTPAddr is the process's --http-listen address (host:port), or a
	// base URL ("http://host:port").
	HTTPAddr string
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
}

// Error is an answer other than OK.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("fault injection: HTTP %d: %s", e.Status, e.Message)
}

// Crash makes the process crash (see CrashRequest). It returns nil once the
// process answered or its connection broke as it exited.
func (c Client) Crash(ctx context.Context, dropUnsynced bool) error {
	_, err := c.post(ctx, ActionCrash, CrashRequest{DropUnsynced: dropUnsynced})
	if err != nil && exitedMidCall(err) {
		return nil
	}
	return err
}

// Disk injects a disk fault.
func (c Client) Disk(ctx context.Context, f DiskFault) (Response, error) {
	return c.post(ctx, ActionDisk, f.Request())
}

// Flip flips one bit of the newest batch of a replica's log on disk.
func (c Client) Flip(ctx context.Context, topic string, partition int32) (Response, error) {
	return c.post(ctx, ActionFlip, FlipRequest{Topic: topic, Partition: partition})
}

// Clock sets the process's clock offset from the wall clock.
func (c Client) Clock(ctx context.Context, offset time.Duration) (Response, error) {
	return c.post(ctx, ActionClock, ClockRequest{Offset: offset.String()})
}

// Link slows down and duplicates the process's calls to a peer.
func (c Client) Link(ctx context.Context, f LinkFault) (Response, error) {
	return c.post(ctx, ActionLink, f.Request())
}

// Clear removes every active disk and link fault and sets the clock offset
// to 0.
func (c Client) Clear(ctx context.Context) error {
	_, err := c.post(ctx, ActionClear, struct{}{})
	return err
}

func (c Client) url(action string) string {
	base := c.HTTPAddr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return strings.TrimRight(base, "/") + PathPrefix + action
}

func (c Client) post(ctx context.Context, action string, body any) (Response, error) {
	var out Response
	b, err := json.Marshal(body)
	if err != nil {
		return out, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(action), bytes.NewReader(b))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return out, fmt.Errorf("fault injection %s at %s: %w", action, c.HTTPAddr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, fmt.Errorf("fault injection %s at %s: reading the answer: %w", action, c.HTTPAddr, err)
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || !out.OK {
		msg := out.Error
		if msg == "" {
			msg = strings.TrimSpace(string(raw))
		}
		if resp.StatusCode == http.StatusNotFound && out.Error == "" {
			msg += " (is the process running with --unsafe.fault-injection?)"
		}
		return out, &Error{Status: resp.StatusCode, Message: msg}
	}
	return out, nil
}

// exitedMidCall reports whether err is the connection of a process that
// exited while answering.
func exitedMidCall(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
