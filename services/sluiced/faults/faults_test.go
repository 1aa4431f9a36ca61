package faults

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-io/sluice/libs/storage"
	"github.com/sluice-io/sluice/libs/storage/vfs"
	"github.com/sluice-io/sluice/libs/verify/faultapi"
)

type fixture struct {
	h     *Handler
	fs    *vfs.FaultFS
	clock *storage.ShiftedClock
	dir   string
	exit  []int
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{fs: vfs.NewFaultFS(vfs.OS, 1), clock: storage.NewShiftedClock(), dir: t.TempDir()}
	f.h = New(Deps{FS: f.fs, Clock: f.clock, Exit: func(code int) { f.exit = append(f.exit, code) },
		ReplicaDir: func(topic string, partition int32) (string, bool) {
			if topic != "t" || partition != 0 {
				return "", false
			}
			return f.dir, true
		}})
	return f
}

func (f *fixture) post(t *testing.T, action, body string) (int, faultapi.Response) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, faultapi.PathPrefix+action, strings.NewReader(body)))
	var resp faultapi.Response
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp), "answer %q", rec.Body.String())
	return rec.Code, resp
}

func TestBadRequestsAnswer400WithAMessage(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ action, body, want string }{
		{"disk", `{"op": "write"`, "not a valid JSON"},
		{"disk", `{"op": "write", "error": "EIO"} {}`, "more than one"},
		{"disk", `{"op": "scribble", "error": "EIO"}`, `"scribble" is not one of`},
		{"disk", `{"op": "write", "error": "EPERM"}`, `"EPERM" is not one of EIO, ENOSPC`},
		{"disk", `{"op": "write"}`, "needs at least one"},
		{"disk", `{"op": "sync", "latency": "soon"}`, `latency: "soon" is not a duration`},
		{"disk", `{"op": "sync", "latency": "-1s"}`, "negative"},
		{"disk", `{"op": "sync", "error": "EIO", "duration": "5"}`, "duration"},
		{"disk", `{"op": "sync", "error": "EIO", "paht_contains": ".log"}`, `unknown field "paht_contains"`},
		{"crash", `{"drop_unsynced": "yes"}`, "not a valid JSON"},
		{"flip", `{"partition": 0}`, "topic: required"},
		{"flip", `{"topic": "t", "partition": -1}`, "negative"},
		{"clock", `{}`, "offset: required"},
		{"clock", `{"offset": "yesterday"}`, "not a duration"},
		{"clock", `{"offset": "-48h"}`, "beyond"},
		{"clear", `{"all": true}`, "unknown field"},
	} {
		code, resp := f.post(t, c.action, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%s %s", c.action, c.body)
		require.False(t, resp.OK)
		require.Contains(t, resp.Error, c.want, "%s %s", c.action, c.body)
	}
	require.Empty(t, f.exit, "a bad crash request must not exit")
	require.Zero(t, f.clock.Offset(), "a bad clock request must not shift the clock")
}

func TestUnknownActionAndMethod(t *testing.T) {
	f := newFixture(t)
	code, resp := f.post(t, "explode", `{}`)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, resp.Error, `unknown fault action "explode"`)

	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, faultapi.PathPrefix+"clear", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)

	code, resp = f.post(t, "flip", `{"topic": "other", "partition": 0}`)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, resp.Error, "no replica of other-0")
}

func TestNoStorageRefusesStorageFaults(t *testing.T) {
	h := New(Deps{Exit: func(int) { t.Fatal("exited") }})
	for action, body := range map[string]string{"disk": `{"op":"sync","error":"EIO"}`, "flip": `{"topic":"t"}`, "crash": `{"drop_unsynced":true}`} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, faultapi.PathPrefix+action, strings.NewReader(body)))
		require.Equal(t, http.StatusBadRequest, rec.Code, action)
		require.Contains(t, rec.Body.String(), "no storage", action)
	}
}

func TestDiskFaultFailsMatchingOperationsUntilClear(t *testing.T) {
	f := newFixture(t)
	code, resp := f.post(t, "disk", `{"op": "write", "path_contains": "t-0", "error": "ENOSPC"}`)
	require.Equal(t, http.StatusOK, code, resp.Error)
	require.True(t, resp.OK)

	write := func(name string) error {
		h, err := f.fs.OpenFile(filepath.Join(f.dir, name), os.O_CREATE|os.O_RDWR, 0o644)
		require.NoError(t, err)
		defer h.Close()
		_, err = h.WriteAt([]byte("x"), 0)
		return err
	}
	require.ErrorIs(t, writeIn(t, f, "t-0", write), vfs.ENOSPC)
	require.NoError(t, writeIn(t, f, "u-0", write), "a path without t-0 is not affected")

	code, _ = f.post(t, "clear", ``)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, writeIn(t, f, "t-0", write))
}

func writeIn(t *testing.T, f *fixture, sub string, write func(string) error) error {
	require.NoError(t, os.MkdirAll(filepath.Join(f.dir, sub), 0o755))
	return write(filepath.Join(sub, "00000000000000000000.log"))
}

func TestDiskFaultEndsAfterDuration(t *testing.T) {
	f := newFixture(t)
	code, resp := f.post(t, "disk", `{"op": "sync", "error": "EIO", "duration": "50ms"}`)
	require.Equal(t, http.StatusOK, code, resp.Error)
	h, err := f.fs.OpenFile(filepath.Join(f.dir, "a"), os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer h.Close()
	require.ErrorIs(t, h.Sync(), vfs.EIO)
	require.Eventually(t, func() bool { return h.Sync() == nil }, 5*time.Second, 10*time.Millisecond)
}

func TestClockShiftsAndClears(t *testing.T) {
	f := newFixture(t)
	code, resp := f.post(t, "clock", `{"offset": "-30s"}`)
	require.Equal(t, http.StatusOK, code, resp.Error)
	require.Equal(t, "-30s", resp.ClockOffset)
	require.Equal(t, -30*time.Second, f.clock.Offset())
	f.post(t, "clear", `{}`)
	require.Zero(t, f.clock.Offset())
}

func TestFlipChangesTheNewestSegment(t *testing.T) {
	f := newFixture(t)
	older := filepath.Join(f.dir, "00000000000000000000.log")
	newest := filepath.Join(f.dir, "00000000000000000100.log")
	require.NoError(t, os.WriteFile(older, []byte("abc"), 0o644))
	require.NoError(t, os.WriteFile(newest, []byte("xyz"), 0o644))
	code, resp := f.post(t, "flip", `{"topic": "t", "partition": 0}`)
	require.Equal(t, http.StatusOK, code, resp.Error)
	require.Equal(t, newest, resp.Path)
	require.EqualValues(t, 2, resp.FileOffset)
	b, err := os.ReadFile(newest)
	require.NoError(t, err)
	require.Equal(t, []byte{'x', 'y', 'z' ^ 1}, b)

	// An empty active segment is passed over for the newest with data.
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "00000000000000000200.log"), nil, 0o644))
	_, resp = f.post(t, "flip", `{"topic": "t", "partition": 0}`)
	require.Equal(t, newest, resp.Path)
}

func TestCrashDropsUnsyncedBytesAndExits137(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(f.dir, "00000000000000000000.log")
	h, err := f.fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer h.Close()
	_, err = h.WriteAt([]byte("synced"), 0)
	require.NoError(t, err)
	require.NoError(t, h.Sync())
	_, err = h.WriteAt([]byte("-unsynced"), 6)
	require.NoError(t, err)

	code, resp := f.post(t, "crash", `{"drop_unsynced": true}`)
	require.Equal(t, http.StatusOK, code, resp.Error)
	require.Equal(t, []int{ExitCode}, f.exit)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "synced", string(b))
}

func TestClientSpeaksTheHandlersFormat(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	f.h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := faultapi.Client{HTTPAddr: srv.URL}
	ctx := t.Context()

	resp, err := c.Clock(ctx, 2*time.Minute)
	require.NoError(t, err)
	require.Equal(t, "2m0s", resp.ClockOffset)
	require.Equal(t, 2*time.Minute, f.clock.Offset())

	_, err = c.Disk(ctx, faultapi.DiskFault{Op: "sync", Error: "EIO", Duration: time.Minute})
	require.NoError(t, err)
	_, err = c.Disk(ctx, faultapi.DiskFault{Op: "fsync", Error: "EIO"})
	var fe *faultapi.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, http.StatusBadRequest, fe.Status)
	require.Contains(t, fe.Message, `"fsync" is not one of`)

	_, err = c.Flip(ctx, "nope", 3)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, http.StatusNotFound, fe.Status)

	require.NoError(t, c.Clear(ctx))
	require.Zero(t, f.clock.Offset())
	require.NoError(t, c.Crash(ctx, false))
	require.Equal(t, []int{ExitCode}, f.exit)
}
