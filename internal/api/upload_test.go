package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
)

// stallHeader marks the requests a stallWatch watches.
const stallHeader = "Stall-Watch"

// stallWatch tells a test when the handler of a watched request (one with
// stallHeader) asks for more of its body than the client has sent so far
// (sent bytes, after which the client stalls): the handler then waits on
// the client. Each watched request is reported once on waiting.
type stallWatch struct {
	sent    int
	waiting chan struct{}
}

func newStallWatch(sent, requests int) *stallWatch {
	return &stallWatch{sent: sent, waiting: make(chan struct{}, requests)}
}

// around serves h with the watched requests' bodies observed.
func (sw *stallWatch) around(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(stallHeader) != "" {
			r.Body = &watchedBody{ReadCloser: r.Body, sw: sw}
		}
		h.ServeHTTP(w, r)
	})
}

// wait waits until n watched handlers wait on their clients.
func (sw *stallWatch) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-sw.waiting:
		case <-timeout:
			t.Fatalf("only %d of %d stalled uploads got to reading their body; the others wait for something else (the store?)", i, n)
		}
	}
}

type watchedBody struct {
	io.ReadCloser
	sw       *stallWatch
	got      int
	reported bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.got >= b.sw.sent && !b.reported {
		b.reported = true
		b.sw.waiting <- struct{}{}
	}
	n, err := b.ReadCloser.Read(p)
	b.got += n
	return n, err
}

// callProbe wraps a store so that a test learns whether CreateJob has
// been called.
type callProbe struct {
	store.Store
	once   sync.Once
	called chan struct{}
}

func (p *callProbe) CreateJob(ctx context.Context, spec store.NewJob, tasks iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	p.once.Do(func() { close(p.called) })
	return p.Store.CreateJob(ctx, spec, tasks)
}

// upload is a submission whose body the test writes as it goes.
type upload struct {
	req  *http.Request
	body *io.PipeWriter
	done chan response // the answer, once the handler answered
}

// startUpload starts a POST /v1/jobs of contentType, watched by a
// stallWatch, and writes head as its first bytes.
func startUpload(t *testing.T, b *testBundle, contentType, head string) *upload {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/jobs", pr)
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(stallHeader, "1")
	u := &upload{req: req, body: pw, done: make(chan response, 1)}
	go func() {
		resp, err := b.srv.Client().Do(req)
		if err != nil {
			u.done <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		u.done <- response{status: resp.StatusCode, header: resp.Header, body: body}
	}()
	_, err = io.WriteString(pw, head)
	require.NoError(t, err)
	return u
}

// stallHeads are the first bytes of a JSON and an NDJSON submission, after
// which their clients stall.
var stallHeads = []struct{ name, contentType, head, tail string }{
	{"json", "application/json", `{` + fullSpec + `,"tasks":[{"i":1},`, `{"i":2},{"i":3}]}`},
	{"ndjson", "application/x-ndjson", "{\"type\":\"echo\"}\n{\"i\":1}\n", "{\"i\":2}\n{\"i\":3}\n"},
}

// TestSubmitReadsTheWholeBodyBeforeCallingTheStore shows that a submission
// reaches the store only once its body has ended: a client that stalls
// mid-body holds no store connection (and, on SQLite, not the one writer).
func TestSubmitReadsTheWholeBodyBeforeCallingTheStore(t *testing.T) {
	t.Parallel()
	for _, tc := range stallHeads {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			probe := &callProbe{called: make(chan struct{})}
			watch := newStallWatch(len(tc.head), 1)
			b := setup(t, &options{
				wrap:   func(s store.Store) store.Store { probe.Store = s; return probe },
				around: watch.around,
			})
			u := startUpload(t, b, tc.contentType, tc.head)
			watch.wait(t, 1)
			select {
			case <-probe.called:
				t.Fatal("the store was called while the client had not sent the whole body")
			default:
			}

			_, err := io.WriteString(u.body, tc.tail)
			require.NoError(t, err)
			require.NoError(t, u.body.Close())
			resp := <-u.done
			conform(t, u.req, resp)
			require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
			id := resp.json(t)["id"].(string)
			require.Equal(t, []string{`{"i":1}`, `{"i":2}`, `{"i":3}`}, payloadsOf(t, b.store, id))
		})
	}
}

// TestStalledUploadsHoldNoStoreConnection holds dozens of uploads stalled
// mid-body against a PostgreSQL store of two connections (and SQLite): the
// API keeps answering reads, submissions and /readyz.
func TestStalledUploadsHoldNoStoreConnection(t *testing.T) {
	t.Parallel()
	const stalled = 24 // 12 of each kind, against a pool of 2
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			watchJSON := newStallWatch(len(stallHeads[0].head), stalled)
			watchNDJSON := newStallWatch(len(stallHeads[1].head), stalled)
			b := setup(t, &options{kind: kind, pgPool: 2, around: func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("Content-Type") == "application/json" {
						watchJSON.around(h).ServeHTTP(w, r)
						return
					}
					watchNDJSON.around(h).ServeHTTP(w, r)
				})
			}})
			var uploads []*upload
			for i := range stalled {
				tc := stallHeads[i%2]
				uploads = append(uploads, startUpload(t, b, tc.contentType, tc.head))
			}
			watchJSON.wait(t, stalled/2)
			watchNDJSON.wait(t, stalled/2)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			get := func(path string) response {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+path, nil)
				require.NoError(t, err)
				return send(t, b.srv.Client(), req)
			}
			require.Equal(t, http.StatusOK, get("/readyz").status, "readiness with %d stalled uploads", stalled)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/jobs", strings.NewReader(`{"type":"echo","tasks":[1,2]}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp := send(t, b.srv.Client(), req)
			require.Equal(t, http.StatusAccepted, resp.status, "a submission with %d stalled uploads: %s", stalled, resp.body)
			id := resp.json(t)["id"].(string)
			require.Equal(t, http.StatusOK, get("/v1/jobs/"+id).status)
			require.Equal(t, http.StatusOK, get("/v1/jobs").status)

			for _, u := range uploads {
				u.body.CloseWithError(errors.New("the client gives up"))
			}
			for _, u := range uploads {
				<-u.done
			}
			jobs, _, err := b.store.ListJobs(context.Background(), store.ListJobsOpts{})
			require.NoError(t, err)
			require.Len(t, jobs, 1, "the abandoned uploads wrote nothing")
		})
	}
}

// rawPost opens a connection to the test server and sends the head of a
// POST /v1/jobs whose body is contentLength bytes, then body (which may be
// shorter: the rest never comes).
func rawPost(t *testing.T, b *testBundle, contentLength int, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s",
		contentLength, body)
	require.NoError(t, err)
	return conn
}

// readAnswer reads one HTTP answer to a POST /v1/jobs from conn, within
// wait, and checks it against the OpenAPI document.
func readAnswer(t *testing.T, conn net.Conn, wait time.Duration) (response, *bufio.Reader) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err, "no answer within %s", wait)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := response{status: resp.StatusCode, header: resp.Header, body: body}
	req, err := http.NewRequest(http.MethodPost, "http://warren/v1/jobs", nil)
	require.NoError(t, err)
	conform(t, req, out)
	return out, r
}

// A body that stops arriving is cut after Config.BodyTimeout with 408, its
// connection is closed, and nothing is written.
func TestStalledUploadIsCut(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.BodyTimeout = timeout }})
	head := "{\"type\":\"echo\"}\n{\"i\":1}\n"
	conn := rawPost(t, b, len(head)+100, head)
	start := time.Now()
	resp, r := readAnswer(t, conn, 10*time.Second)
	requireError(t, resp, http.StatusRequestTimeout, "request_timeout")
	require.GreaterOrEqual(t, time.Since(start), timeout*3/4, "cut before the body timeout")
	_, err := r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection is closed after a stalled body")
	requireNoJobs(t, b.store)
}

// The body timeout counts from the last byte, not from the start: an
// upload that keeps sending, however slowly, for longer than the timeout
// is not cut.
func TestSlowUploadThatKeepsSendingIsNotCut(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.BodyTimeout = timeout }})
	const lines = 15
	var body strings.Builder
	body.WriteString("{\"type\":\"echo\"}\n")
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&body, "{\"i\":%d}\n", i)
	}
	conn := rawPost(t, b, body.Len(), "")
	parts := strings.SplitAfter(body.String(), "\n")
	start := time.Now()
	for _, part := range parts {
		_, err := io.WriteString(conn, part)
		require.NoError(t, err)
		time.Sleep(timeout / 10) // the pace of a slow client is what is tested
	}
	require.Greater(t, time.Since(start), timeout, "the upload took longer than the body timeout")
	resp, _ := readAnswer(t, conn, 10*time.Second)
	require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
}

// A job larger than what the spool keeps in memory goes through its
// temporary file whole and in order.
func TestSubmitSpoolsLargeJobsWhole(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			const n = 20000 // about 2.4 MB of payloads, over the 1 MiB kept in memory
			var body strings.Builder
			body.WriteString("{\"type\":\"echo\"}\n")
			want := make([]string, n)
			for i := range n {
				want[i] = fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i+1, strings.Repeat("x", 100))
				body.WriteString(want[i] + "\n")
			}
			resp := b.submitNDJSON(t, body.String())
			require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
			require.Equal(t, want, payloadsOf(t, b.store, resp.json(t)["id"].(string)))
		})
	}
}
