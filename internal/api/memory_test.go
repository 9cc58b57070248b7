package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
)

// rss is the process's resident set size in bytes (Linux), or 0 where
// /proc does not tell.
func rss(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	return 0
}

// A large result read by many clients that stall costs the server a
// chunk per client, not the result per client, and the stalled clients
// are cut once a chunk took longer than ResultWriteTimeout: 16 clients
// that stop reading a 50 MB result used to hold 16 copies of it (the
// server went from 585 MB to 2.1 GB and stayed there).
//
// Not parallel: it measures the process's memory, which parallel tests
// would move.
func TestStalledReadersOfALargeResultHoldLittleMemory(t *testing.T) {
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			cut := make(chan struct{}, 16)
			b := setup(t, &options{kind: kind, onNew: func(_ *testing.T, cfg *api.Config) {
				cfg.ResultWriteTimeout = 2 * time.Second
				cfg.Logger = slog.New(onMessage{"api: result not read in time; cut", cut})
			}})
			job := createJob(t, b.store, 1)
			const size = 50 << 20
			result := []byte(`"` + strings.Repeat("x", size-2) + `"`)
			finish(t, b.store, job.ID, 1, warren.JobCompleted, result)
			result = nil //nolint:ineffassign // let it go before the baseline
			runtime.GC()
			debug.FreeOSMemory()
			before := rss(t)
			if before == 0 {
				t.Skip("no /proc/self/status: cannot read this process's memory")
			}

			addr := strings.TrimPrefix(b.srv.URL, "http://")
			conns := make([]net.Conn, 16)
			for i := range conns {
				conn, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				t.Cleanup(func() { _ = conn.Close() })
				// A reader that reads almost nothing: its receive buffer
				// fills, and the server's writes block.
				require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
				_, err = fmt.Fprintf(conn, "GET /v1/jobs/%s/result HTTP/1.1\r\nHost: localhost\r\n\r\n", job.ID)
				require.NoError(t, err)
				resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.Equal(t, int64(size), resp.ContentLength)
				conns[i] = conn
			}
			// Every server goroutine now holds what it holds while its
			// client stalls: sample that for a while.
			peak := int64(0)
			for range 10 {
				runtime.GC()
				peak = max(peak, rss(t))
				time.Sleep(50 * time.Millisecond)
			}
			grew := peak - before
			t.Logf("%s: RSS %d MB before, %d MB at most with 16 stalled readers of a %d MB result", kind, before>>20, peak>>20, size>>20)
			require.Less(t, grew, int64(100<<20), "16 stalled readers must not hold the result each (grew %d MB)", grew>>20)

			// The stalled readers are cut: once the server gave up on
			// each, reading what is left ends before the result's end.
			for range conns {
				select {
				case <-cut:
				case <-time.After(time.Minute):
					t.Fatal("the stalled readers were not cut")
				}
			}
			read := make(chan int64, len(conns))
			for _, conn := range conns {
				// What the kernel still held for it may arrive; the
				// rest never does (the connection ends, at once or by
				// the deadline, however its end shows).
				require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
				go func() {
					n, _ := io.Copy(io.Discard, conn)
					read <- n
				}()
			}
			for range conns {
				require.Less(t, <-read, int64(size), "a stalled reader does not get the whole result")
			}
		})
	}
}

// onMessage is a slog handler that sends on ch for each record whose
// message is msg, and drops every record.
type onMessage struct {
	msg string
	ch  chan<- struct{}
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }

func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.ch <- struct{}{}
	}
	return nil
}

func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h onMessage) WithGroup(string) slog.Handler { return h }

// A listing shows a job's metadata only when it is small: five jobs with
// 20 MiB of metadata each made every GET /v1/jobs 105 MB. The job itself
// shows all of it.
func TestListingsLeaveLargeMetadataOut(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	small := b.mustSubmit(t, `{"type":"echo","tasks":[1],"metadata":{"owner":"ops"}}`)
	large := `{"blob":"` + strings.Repeat("x", 60<<10) + `"}`
	big := b.mustSubmit(t, `{"type":"echo","tasks":[1],"metadata":`+large+`}`)

	resp := b.get(t, "/v1/jobs")
	require.Equal(t, http.StatusOK, resp.status)
	require.Less(t, len(resp.body), 4<<10, "the listing stays small")
	var list struct {
		Jobs []map[string]any `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &list))
	byID := map[string]map[string]any{}
	for _, j := range list.Jobs {
		byID[j["id"].(string)] = j
	}
	require.Equal(t, map[string]any{"owner": "ops"}, byID[small]["metadata"])
	require.NotContains(t, byID[small], "metadata_omitted")
	require.Nil(t, byID[big]["metadata"])
	require.Equal(t, true, byID[big]["metadata_omitted"])

	resp = b.get(t, "/v1/jobs/"+big)
	require.Equal(t, http.StatusOK, resp.status)
	var job struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &job))
	require.JSONEq(t, large, string(job.Metadata), "the job itself shows all of it")
	require.NotContains(t, string(resp.body), "metadata_omitted")
}
