package ui

// The dashboard in a real headless Chromium, driven with chromedp, against
// a real server (API, relay, aggregator on SQLite) and a real worker on the
// real broker. Screenshots of every page are saved in WARREN_UI_SCREENSHOTS
// (or a temporary directory) and the path is logged. The dashboard's files
// are internal/ui; the test is here, in a module of its own, so that
// chromedp is not a requirement of warren's.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
	"github.com/warrenhq/warren/worker"
)

// The tokens of the test's server, one per scope.
const (
	readToken  = "read-token-1"
	writeToken = "write-token-2"
	adminToken = "admin-token-3"
)

// stepTimeout bounds each browser step; a page that never shows what it
// should fails the test with the step's name.
const stepTimeout = 30 * time.Second

// installation is a server and a worker with their own prefix and store.
type installation struct {
	url    string
	hooks  chan string // the bodies the webhook receiver was sent
	hookTo string      // the webhook receiver's URL
	mu     sync.Mutex
	closed map[string]warren.JobState
	signal chan struct{} // pinged when a job closes
}

func startInstallation(t *testing.T) *installation {
	t.Helper()
	topo := &broker.TopologyOptions{RetryTiers: []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}, DeliveryLimit: 3}
	names, _ := amqptest.Topology(t, topo)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	tokens, err := server.ParseTokens(readToken + ":read," + writeToken + ":write," + adminToken + ":admin")
	require.NoError(t, err)

	in := &installation{closed: map[string]warren.JobState{}, signal: make(chan struct{}, 1), hooks: make(chan string, 16)}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case in.hooks <- string(body):
		default:
		}
	}))
	t.Cleanup(receiver.Close)
	in.hookTo = receiver.URL
	srv, err := server.New(server.Config{
		AMQPURL: amqptest.URL(), Store: st, Prefix: names.Prefix, Listen: "127.0.0.1:0", Tokens: tokens,
		WebhookAllowPrivate: true, // the receiver is on loopback
		RetryTiers:          topo.RetryTiers, DeliveryLimit: topo.DeliveryLimit,
		RelayPollInterval: 20 * time.Millisecond, CloseScanInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
		Hooks: server.Hooks{OnJobClosed: func(id string, state warren.JobState) {
			in.mu.Lock()
			in.closed[id] = state
			in.mu.Unlock()
			select {
			case in.signal <- struct{}{}:
			default:
			}
		}},
	})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	in.url = srv.URL()

	w, err := worker.New(worker.Config{AMQPURL: amqptest.URL(), Prefix: names.Prefix, Concurrency: 4, Name: "ui-test-worker",
		RetryTiers: topo.RetryTiers, DeliveryLimit: topo.DeliveryLimit, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for typ, h := range jobHandlers {
		w.Handle(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return in
}

// jobHandlers run the test's jobs: the dashboard needs jobs that complete,
// fail, can be redriven and run until cancelled. They are the test's own,
// not the built-ins of `warren worker`, which belong to the command.
var jobHandlers = map[string]worker.HandlerFunc{
	// echo returns its payload.
	"echo": func(_ context.Context, t worker.Task) (any, error) { return t.Payload, nil },
	// sleep runs {"ms": N} milliseconds or until the worker stops it.
	"sleep": func(ctx context.Context, t worker.Task) (any, error) {
		var in struct{ MS int64 }
		if err := json.Unmarshal(t.Payload, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		timer := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, nil
		}
	},
	// flaky fails transiently on its first fail_times attempts, for good
	// if permanent, and otherwise returns value.
	"flaky": func(_ context.Context, t worker.Task) (any, error) {
		var in struct {
			Value     json.RawMessage `json:"value"`
			FailTimes int             `json:"fail_times"`
			Permanent bool            `json:"permanent"`
		}
		if err := json.Unmarshal(t.Payload, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		switch {
		case t.Attempt <= in.FailTimes:
			return nil, fmt.Errorf("flaky: planned transient failure on attempt %d of %d", t.Attempt, in.FailTimes)
		case in.Permanent:
			return nil, worker.Permanent(errors.New("flaky: planned permanent failure"))
		}
		return in.Value, nil
	},
	// panicky panics on every attempt: its failures carry a Go stack.
	"panicky": func(_ context.Context, t worker.Task) (any, error) {
		panic(fmt.Sprintf("panicky: planned panic on attempt %d", t.Attempt))
	},
}

// submit creates a job through the API with the admin token and returns
// its id.
func (in *installation) submit(t *testing.T, spec string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, in.url+"/v1/jobs", strings.NewReader(spec))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", body)
	var out struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &out))
	return out.ID
}

// state returns job id's state as the API says.
func (in *installation) state(t *testing.T, id string) warren.JobState {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, in.url+"/v1/jobs/"+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct{ State warren.JobState }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.State
}

// waitClosed waits until the server closed job id, and returns its state.
func (in *installation) waitClosed(t *testing.T, id string) warren.JobState {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		in.mu.Lock()
		state, ok := in.closed[id]
		in.mu.Unlock()
		if ok {
			return state
		}
		select {
		case <-in.signal:
		case <-deadline:
			t.Fatalf("job %s did not close in 60 s", id)
		}
	}
}

// chromium returns the path of the Chromium binary: $CHROMIUM, or
// chromium on the PATH. Under CI (CI set) a missing browser fails the
// test, since .ci/run installs it; elsewhere the test is skipped.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: .ci/run installs the Debian package chromium; the dashboard test needs it")
	}
	t.Skip("chromium is not installed (apt-get install chromium, or set CHROMIUM): skipping the dashboard's browser test")
	return ""
}

// browser is one headless Chromium with one tab, and what it logged.
type browser struct {
	ctx   context.Context
	shots string // where screenshots go

	mu     sync.Mutex
	errors []string // uncaught exceptions, console errors, CSP violations
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless, // --headless, and hidden scrollbars for the screenshots
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR="+t.TempDir()), // its singleton socket, removed with it
		chromedp.WindowSize(1360, 900),
	)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b := &browser{ctx: ctx, shots: screenshotDir(t)}
	require.NoError(t, chromedp.Do(ctx)) // starts the browser and opens the tab
	proc := chromedp.FromContext(ctx).Browser.Process()
	require.NotNil(t, proc)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for msg, err := range chromedp.Console(ctx) {
			if err != nil {
				return // the tab is closing
			}
			// A 404 from a route this server lacks (events, deliveries,
			// queues) is logged by the network source: expected.
			if (msg.Type == chromedp.ConsoleError || msg.IsException()) && msg.Source != "network" {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", msg, msg.URL, msg.Line+1))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // kills the browser and waits for it
		<-consoleDone
		// The browser process is gone: no Chromium outlives the test.
		require.ErrorIs(t, proc.Signal(syscall.Signal(0)), os.ErrProcessDone, "chromium (pid %d) still runs", proc.Pid)
	})
	return b
}

// screenshotDir is $WARREN_UI_SCREENSHOTS (created) or a temporary one.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("WARREN_UI_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Logf("dashboard screenshots in %s", dir)
	return dir
}

// do runs steps as the named step, within stepTimeout.
func (b *browser) do(t *testing.T, step string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...), "step: %s; %s", step, b.state())
}

// state says where the page is and what it shows, for a step's failure.
func (b *browser) state() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText.slice(0, 1500) : "")`))
	if err != nil {
		text = "(the page could not be read: " + err.Error() + ")"
	}
	return fmt.Sprintf("the page: %s\nits JavaScript errors: %q", text, b.jsErrors())
}

// until waits for a JavaScript expression to be true.
func (b *browser) until(t *testing.T, step, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "step: %s: waiting for %s; %s", step, expr, b.state())
}

// eval returns a JavaScript expression's value.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "evaluate %s", expr)
	return v
}

// screenshot saves the whole page as name.png.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot %s", name)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "a PNG")
	require.NoError(t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

// colorScheme makes the page see prefers-color-scheme: scheme.
func (b *browser) colorScheme(t *testing.T, scheme string) {
	t.Helper()
	_, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
	require.NoError(t, err)
}

// signIn enters token in the token form and waits for the form to go.
func (b *browser) signIn(t *testing.T, token string) {
	t.Helper()
	b.do(t, "sign in", chromedp.WaitVisible(chromedp.CSS("#token-form")),
		chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#token-form button[type=submit]")),
		chromedp.WaitNotPresent(chromedp.CSS("#token-form")))
}

func (b *browser) signOut(t *testing.T) {
	t.Helper()
	b.do(t, "sign out", chromedp.Click(chromedp.CSS("#sign-out")), chromedp.WaitVisible(chromedp.CSS("#token-form")))
}

// open loads a dashboard URL and waits for selector.
func (b *browser) open(t *testing.T, url, selector string) {
	t.Helper()
	b.do(t, "open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(selector)))
}

// confirm clicks selector and then the confirmation dialog's button.
func (b *browser) confirm(t *testing.T, selector string) {
	t.Helper()
	b.do(t, "click "+selector+" and confirm", chromedp.Click(chromedp.CSS(selector)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitNotVisible(chromedp.CSS("#confirm")))
}

func (b *browser) jsErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

func present(selector string) string {
	return fmt.Sprintf("document.querySelector(%q) !== null", selector)
}

func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	in := startInstallation(t)

	// Jobs of every kind: one that completes (with metadata that looks
	// like HTML, which must show as text), one with failures, one that
	// runs until cancelled, and one whose task fails its first attempt and
	// succeeds when redriven.
	echo := in.submit(t, `{"type":"echo","reduce":"collect","metadata":{"team":"<img src=x onerror=alert(1)>"},
		"webhook":{"url":"`+in.hookTo+`/hook","secret":"s3cret"},
		"tasks":[{"n":1},{"n":2},{"n":3},{"n":4},{"n":5}]}`)
	broken := in.submit(t, `{"type":"flaky","max_retries":0,"tasks":[{"value":1},{"permanent":true},{"value":3},{"permanent":true}]}`)
	sleeper := in.submit(t, `{"type":"sleep","tasks":[{"ms":600000},{"ms":600000}]}`)
	// A redrive keeps a task's attempts: its second run is attempt 2.
	redrivable := in.submit(t, `{"type":"flaky","max_retries":0,"tasks":[{"value":"a"},{"value":"b","fail_times":1}]}`)
	require.Equal(t, warren.JobCompleted, in.waitClosed(t, echo))
	require.Equal(t, warren.JobFailed, in.waitClosed(t, broken))
	require.Equal(t, warren.JobFailed, in.waitClosed(t, redrivable))

	// The token gate: no job data before a token.
	b.open(t, in.url+"/ui/", "#token-form")
	require.False(t, eval[bool](t, b, present("tr[data-job-id]")), "no job listed before a token")
	require.NotContains(t, eval[string](t, b, "document.body.innerText"), echo, "no job id shown before a token")
	b.screenshot(t, "01-token-gate")

	// An unknown token is refused.
	b.do(t, "unknown token", chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token"), chromedp.Click(chromedp.CSS("#token-form button[type=submit]")))
	b.until(t, "unknown token message", `document.querySelector('#token-error').textContent.includes('does not know')`)

	// A read-only token: the jobs list, the filters, no actions.
	b.signIn(t, readToken)
	b.until(t, "jobs listed", `document.querySelectorAll('#jobs-table tr[data-job-id]').length === 4`)
	for id, state := range map[string]string{echo: "completed", broken: "failed", redrivable: "failed"} {
		require.Equal(t, state, eval[string](t, b, fmt.Sprintf(`document.querySelector('tr[data-job-id=%q]').dataset.state`, id)))
	}
	b.until(t, "a running job", fmt.Sprintf(`document.querySelector('tr[data-job-id=%q]').dataset.state === 'running'`, sleeper))
	b.until(t, "counts per state", `document.querySelector('[data-count-state=failed] .n')?.textContent === '2'`)
	// One vocabulary: completed / failed / expected; the rate is the
	// API's (finished tasks per second from the first task's start), a
	// number once a task finished.
	require.Contains(t, eval[string](t, b, `document.querySelector('#jobs-table thead').textContent`), "Completed / failed / expected")
	b.until(t, "the completed job's rate", fmt.Sprintf(`/\/s$/.test(document.querySelector('tr[data-job-id=%q] td.rate').textContent)`, echo))
	b.screenshot(t, "02-jobs")

	b.do(t, "filter by type", chromedp.SendKeys(chromedp.CSS("#filter-type"), "flaky"), chromedp.Click(chromedp.CSS("#filters button[type=submit]")))
	b.until(t, "only flaky jobs", `location.search === '?type=flaky' && document.querySelectorAll('#jobs-table tr[data-job-id]').length === 2`)
	b.until(t, "only flaky jobs listed", fmt.Sprintf(`[...document.querySelectorAll('#jobs-table tr[data-job-id]')].every(r => [%q, %q].includes(r.dataset.jobId))`, broken, redrivable))
	b.screenshot(t, "03-jobs-filtered-by-type")

	// The search box finds a job by a task's error, and the queue filter
	// keeps the jobs of one queue; a search keeps the other filters.
	b.open(t, in.url+"/ui/jobs", "#filter-q")
	b.do(t, "search a task's error", chromedp.SendKeys(chromedp.CSS("#filter-q"), "PERMANENT failure"),
		chromedp.Click(chromedp.CSS("#filters button[type=submit]")))
	b.until(t, "only the job whose task failed for good", fmt.Sprintf(
		`new URLSearchParams(location.search).get('q') === 'PERMANENT failure' && document.querySelectorAll('#jobs-table tr[data-job-id]').length === 1 && document.querySelector('#jobs-table tr[data-job-id=%q]') !== null`, broken))
	b.screenshot(t, "03b-jobs-searched")
	b.do(t, "search and queue", chromedp.SendKeys(chromedp.CSS("#filter-queue"), "gpu"), chromedp.Click(chromedp.CSS("#filters button[type=submit]")))
	b.until(t, "no flaky job on queue gpu", `new URLSearchParams(location.search).get('queue') === 'gpu' && document.querySelector('#jobs-table tr.empty') !== null`)
	b.open(t, in.url+"/ui/jobs?queue=default&created=1h", "#filter-q")
	b.until(t, "every job on the default queue, created in the last hour", `document.querySelectorAll('#jobs-table tr[data-job-id]').length === 4 && document.querySelector('#filter-created').value === '1h'`)

	// The job with failures: its failed tasks and their errors; a read
	// token offers no action.
	b.do(t, "open the failed job", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-job-id=%q] a`, broken))))
	b.until(t, "failed tasks listed", `document.querySelectorAll('#failed-tasks-table tr[data-task-id]').length === 2`)
	require.Contains(t, eval[string](t, b, `document.querySelector('#failed-tasks-table').innerText`), "flaky: planned permanent failure")
	require.NotEmpty(t, eval[string](t, b, `document.querySelector('#job-error').textContent`), "why the job failed")
	b.until(t, "timeline drawn", present("#timeline-chart .bucket"))
	b.until(t, "tasks listed", `document.querySelectorAll('#tasks-table tr[data-task-id]').length === 4`)
	require.Zero(t, eval[int](t, b, `document.querySelectorAll('#job-actions button').length`), "a read token has no action")
	b.screenshot(t, "04-job-with-failures-read-only")

	// A write token: redrive, cancel and delete, but not the dead-letter
	// operations.
	b.signOut(t)
	b.signIn(t, writeToken)
	b.open(t, in.url+"/ui/jobs/"+broken, "#action-redrive")
	require.True(t, eval[bool](t, b, present("#action-delete")))
	b.open(t, in.url+"/ui/deadletters", "#dl-table")
	require.False(t, eval[bool](t, b, present("#dl-replay-all")), "replay needs admin")
	require.False(t, eval[bool](t, b, present("#dl-purge-all")), "purge needs admin")

	// An admin token: cancel a running job from its page.
	b.signOut(t)
	b.signIn(t, adminToken)
	b.open(t, in.url+"/ui/jobs/"+sleeper, "#action-cancel")
	b.confirm(t, "#action-cancel")
	b.until(t, "cancelled", `document.querySelector('#job-title .badge')?.textContent === 'cancelled'`)
	require.Equal(t, warren.JobCancelled, in.state(t, sleeper), "cancelled in the store")
	b.until(t, "no cancel once cancelled", `document.querySelector('#action-cancel') === null`)
	b.screenshot(t, "05-job-cancelled")

	// Redrive the job whose task failed its first attempt: it completes.
	b.open(t, in.url+"/ui/jobs/"+redrivable, "#action-redrive")
	in.mu.Lock()
	delete(in.closed, redrivable)
	in.mu.Unlock()
	b.confirm(t, "#action-redrive")
	require.Equal(t, warren.JobCompleted, in.waitClosed(t, redrivable))
	b.until(t, "completed after the redrive", `document.querySelector('#job-title .badge')?.textContent === 'completed'`)
	b.until(t, "its result shown", `document.querySelector('#result-preview')?.textContent.includes('"b"')`)
	b.screenshot(t, "06-job-redriven")

	// The completed job: result preview, and metadata shown as text.
	b.open(t, in.url+"/ui/jobs/"+echo, "#result-preview")
	b.until(t, "result preview", `document.querySelector('#result-preview').textContent.includes('"n": 5')`)
	summary := eval[string](t, b, `document.querySelector('#job-summary').innerText.toLowerCase()`) // the labels are shown in capitals
	require.Contains(t, summary, "finished\n100%", "finished: completed and failed, of the expected")
	require.Regexp(t, `rate\n[0-9.,]+/s`, summary)
	require.Regexp(t, `ran for\n\S+`, summary)
	require.NotContains(t, summary, "ran for\n–", "the first task's start is known")
	require.Contains(t, summary, "closed\n")
	require.Contains(t, eval[string](t, b, `document.querySelector('#details').innerText`), "Published")
	require.Contains(t, eval[string](t, b, `document.querySelector('#details pre').textContent`), "<img src=x onerror=alert(1)>")
	require.False(t, eval[bool](t, b, present("#details img")), "metadata is text, never HTML")
	select {
	case body := <-in.hooks:
		require.Contains(t, body, echo, "the webhook names the job")
	case <-time.After(stepTimeout):
		t.Fatal("the completed job's webhook was not delivered")
	}
	b.until(t, "its webhook delivery shown", `document.querySelector('#deliveries-table')?.innerText.includes('delivered')`)
	require.NotContains(t, eval[string](t, b, "document.body.innerText"), "s3cret", "the webhook's secret is never shown")
	b.screenshot(t, "07-job-completed")
	b.colorScheme(t, "dark")
	b.screenshot(t, "08-job-completed-dark")
	b.colorScheme(t, "light")

	// Dead letters: grouped and listed, the redriven job's settled (not
	// pending), the settled ones purged, then one job's.
	b.open(t, in.url+"/ui/deadletters", "#dl-table")
	b.until(t, "the failed job's dead letters", fmt.Sprintf(`document.querySelectorAll('#dl-table tr[data-job-id=%q]').length === 2`, broken))
	require.Contains(t, eval[string](t, b, `document.querySelector('#dl-by-reason').innerText`), "permanent")
	require.True(t, eval[bool](t, b, present("#dl-replay-all")))
	b.until(t, "the redriven job's dead letter", fmt.Sprintf(`document.querySelectorAll('#dl-table tr[data-job-id=%q]').length === 1`, redrivable))
	require.Equal(t, "settled: resent", eval[string](t, b, fmt.Sprintf(`document.querySelector('#dl-table tr[data-job-id=%q] td.dl-state').textContent`, redrivable)),
		"the redrive sent its task back: nothing left to do")
	require.Equal(t, 2, eval[int](t, b, fmt.Sprintf(`document.querySelectorAll('#dl-table tr[data-job-id=%q][data-pending=true]').length`, broken)), "the failed job's are pending")
	require.Contains(t, eval[string](t, b, `document.querySelector('#updated').textContent`), "3 message(s), 2 pending")
	b.screenshot(t, "09-dead-letters")
	b.confirm(t, "#dl-purge-settled")
	b.until(t, "purged the settled", `document.querySelector('#notice').textContent.startsWith('Purged 1 settled')`)
	b.until(t, "the settled letter gone", fmt.Sprintf(`document.querySelector('#dl-table') && document.querySelectorAll('#dl-table tr[data-job-id=%q]').length === 0`, redrivable))
	require.Equal(t, 2, eval[int](t, b, fmt.Sprintf(`document.querySelectorAll('#dl-table tr[data-job-id=%q]').length`, broken)), "pending ones stay")
	b.confirm(t, fmt.Sprintf(`#dl-by-job tr[data-job-id=%q] button.danger`, broken))
	b.until(t, "purged", `document.querySelector('#notice').textContent.startsWith('Purged 2')`)
	b.until(t, "the purged job's letters gone", `document.querySelector('#dl-table tr.empty') !== null`)

	// Queues and workers: the work queue with its consumer, and the
	// worker from its heartbeats.
	b.open(t, in.url+"/ui/queues", "#queues-panel")
	b.until(t, "the work queue listed", `[...document.querySelectorAll('#queues table tr')].some(r => r.innerText.includes('tasks.q'))`)
	b.until(t, "the worker listed", `document.querySelector('#workers-table')?.innerText.includes('ui-test-worker') &&
		document.querySelector('#workers-table').innerText.includes('alive')`)
	b.screenshot(t, "10-queues-and-workers")

	// A 401 (the token no longer accepted) brings the form back.
	require.True(t, eval[bool](t, b, `sessionStorage.setItem('warren.token', 'revoked'); true`), "a token the server does not know")
	b.open(t, in.url+"/ui/jobs", "#token-form")

	require.Empty(t, b.jsErrors(), "the page logged errors")
}

// Without tokens the page needs none; a job's page follows the events
// stream. The API runs without a broker: the page only needs the API.
func TestDashboardWithoutTokensFollowsEvents(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	// The hub reads the store only when told (Notify): what the page shows
	// after each step can only have come through the stream.
	events := api.NewEvents(api.EventsConfig{PollInterval: time.Hour})
	h, err := api.New(api.Config{Store: st, Events: events, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(events.Close) // before srv.Close: it waits for the streams
	ctx := context.Background()
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "echo"}, func(yield func(json.RawMessage, error) bool) {
		yield(json.RawMessage(`{"n":1}`), nil)
	})
	require.NoError(t, err)

	b.open(t, srv.URL+"/ui", "#jobs-table") // /ui redirects to /ui/
	b.until(t, "the job listed", fmt.Sprintf(`document.querySelector('tr[data-job-id=%q]')?.dataset.state === 'pending'`, job.ID))
	require.Contains(t, eval[string](t, b, `document.querySelector('#session').textContent`), "no tokens")
	require.False(t, eval[bool](t, b, present("#sign-out")))

	b.open(t, srv.URL+"/ui/jobs/"+job.ID, "#job-title")
	b.until(t, "pending, following the stream", `document.querySelector('#job-title .badge')?.textContent === 'pending' &&
		document.querySelector('#live').textContent === 'live'`)
	require.True(t, eval[bool](t, b, present("#action-cancel")), "without tokens every action is offered")

	// The relay publishes the task: running, from a progress event.
	_, err = st.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, task := range tasks {
			refs[i] = task.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	events.Notify(job.ID)
	b.until(t, "running, from a progress event", `document.querySelector('#job-title .badge')?.textContent === 'running'`)

	// Its outcome and the close: completed, from the closed event.
	now := time.Now()
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted,
		Result: json.RawMessage(`{"n":1}`), StartedAt: &now, FinishedAt: &now}})
	require.NoError(t, err)
	closing, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	closed, err := st.FinishJob(ctx, job.ID, closing.Version, warren.JobCompleted, nil, "")
	require.NoError(t, err)
	require.True(t, closed)
	events.Notify(job.ID)
	b.until(t, "completed, from the closed event", `document.querySelector('#job-title .badge')?.textContent === 'completed' &&
		document.querySelector('#live').textContent === 'closed'`)
	require.Empty(t, b.jsErrors(), "the page logged errors")
}

// A job whose reduce is a task shows, through the event stream, that it
// reduces (the badge beside its state), its reduce task as task 0 in the
// task table, and its close with the reduce task's result.
func TestDashboardShowsAReducingJob(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	events := api.NewEvents(api.EventsConfig{PollInterval: time.Hour})
	h, err := api.New(api.Config{Store: st, Events: events, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(events.Close)
	ctx := context.Background()
	policy := warren.Policy{ReduceTask: &warren.ReduceTask{Type: "total", Queue: "reducers"}}
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "echo", Policy: policy}, func(yield func(json.RawMessage, error) bool) {
		yield(json.RawMessage(`1`), nil)
	})
	require.NoError(t, err)
	publish := func() { publishAll(t, st) }
	publish()
	now := time.Now()
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted,
		Result: json.RawMessage(`1`), StartedAt: &now, FinishedAt: &now}})
	require.NoError(t, err)

	b.open(t, srv.URL+"/ui/jobs/"+job.ID, "#job-title")
	b.until(t, "running, following the stream", `document.querySelector('#job-title .badge')?.textContent === 'running' &&
		document.querySelector('#live').textContent === 'live'`)
	require.False(t, eval[bool](t, b, present("#reducing")), "not reducing before the reduce task starts")

	ready, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	started, err := st.StartReduce(ctx, job.ID, ready.Version)
	require.NoError(t, err)
	require.True(t, started)
	publish()
	events.Notify(job.ID)
	b.until(t, "reducing, from a progress event", present("#reducing"))
	b.until(t, "the reduce task in the task table", `[...document.querySelectorAll('#tasks tr[data-task-id="0"] td')].some((td) => td.textContent === '0 (reduce)')`)
	require.Contains(t, eval[string](t, b, `document.querySelector('.kv').textContent`), "task total on queue reducers")

	_, err = st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: warren.ReduceTaskID, State: warren.TaskCompleted,
		Result: json.RawMessage(`{"total": 1}`), StartedAt: &now, FinishedAt: &now}})
	require.NoError(t, err)
	reduced, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	closed, err := st.FinishJob(ctx, job.ID, reduced.Version, warren.JobCompleted, []byte(`{"total": 1}`), "")
	require.NoError(t, err)
	require.True(t, closed)
	events.Notify(job.ID)
	b.until(t, "completed, from the closed event", `document.querySelector('#job-title .badge')?.textContent === 'completed' &&
		document.querySelector('#live').textContent === 'closed'`)
	require.False(t, eval[bool](t, b, present("#reducing")))
	require.Empty(t, b.jsErrors(), "the page logged errors")
}

// The job page shows a job's concurrency cap, the tasks its tasks
// spawned, and its chain: the link to its follow-up once it started, and
// the link back from the follow-up.
func TestDashboardShowsACappedSpawningChain(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warren.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	events := api.NewEvents(api.EventsConfig{PollInterval: 50 * time.Millisecond})
	h, err := api.New(api.Config{Store: st, Events: events, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(events.Close)
	ctx := context.Background()
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "crawl", Policy: warren.Policy{Reduce: "collect", MaxConcurrency: 3},
		Then: &store.NewJob{Type: "fetch", Policy: warren.Policy{Reduce: "collect"}}}, func(yield func(json.RawMessage, error) bool) {
		yield(json.RawMessage(`"/"`), nil)
	})
	require.NoError(t, err)
	publish := func() { publishAll(t, st) }
	publish()
	now := time.Now()
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`"/"`),
		StartedAt: &now, FinishedAt: &now, Spawn: []json.RawMessage{json.RawMessage(`"/a"`), json.RawMessage(`"/b"`)}}})
	require.NoError(t, err)

	b.open(t, srv.URL+"/ui/jobs/"+job.ID, "#job-title")
	b.until(t, "the cap", `document.querySelector('#details').textContent.includes('at most 3 tasks at once')`)
	b.until(t, "the spawned tasks", `document.querySelector('#spawned')?.textContent === 'Expected32 spawned'`)
	b.until(t, "the follow-up to come", `document.querySelector('#details').textContent.includes('fetch, once this job completes')`)
	b.screenshot(t, "capped-spawning-job")

	publish()
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{
		{JobID: job.ID, TaskID: 2, State: warren.TaskCompleted, Result: json.RawMessage(`"/a"`), StartedAt: &now, FinishedAt: &now},
		{JobID: job.ID, TaskID: 3, State: warren.TaskCompleted, Result: json.RawMessage(`"/b"`), StartedAt: &now, FinishedAt: &now}})
	require.NoError(t, err)
	done, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	closed, err := st.FinishJob(ctx, job.ID, done.Version, warren.JobCompleted, []byte(`["/", "/a", "/b"]`), "")
	require.NoError(t, err)
	require.True(t, closed)
	done, err = st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.NotEmpty(t, done.NextJob)

	b.open(t, srv.URL+"/ui/jobs/"+job.ID, "#job-title")
	b.until(t, "the link to the next job", `[...document.querySelectorAll('#details a')].some((a) => a.textContent.includes('`+done.NextJob+`'))`)
	b.do(t, "follow it", chromedp.Click(chromedp.CSS(`#details a[href$="`+done.NextJob+`"]`)))
	b.until(t, "the next job's page, with the link back", `document.querySelector('#job-title')?.textContent.includes('fetch') &&
		[...document.querySelectorAll('#details a')].some((a) => a.textContent.includes('`+job.ID+`'))`)
	b.screenshot(t, "follow-up-job")
	require.Empty(t, b.jsErrors(), "the page logged errors")
}

// publishAll marks every pending task of st queued, as a relay whose
// broker confirms everything would.
func publishAll(t *testing.T, st store.Store) {
	t.Helper()
	_, err := st.RelayBatch(context.Background(), 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, task := range tasks {
			refs[i] = task.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
}

// One task whole: reached from the failed list, the task table and the
// dead letters, it shows the payload, every attempt with its traceback,
// and the dead letter.
func TestDashboardShowsOneTaskWhole(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	in := startInstallation(t)
	id := in.submit(t, `{"type":"panicky","max_retries":1,"tasks":[{"n":1,"note":"<b>text</b>"}]}`)
	require.Equal(t, warren.JobFailed, in.waitClosed(t, id))

	b.open(t, in.url+"/ui/", "#token-form")
	b.signIn(t, adminToken)
	b.open(t, in.url+"/ui/jobs/"+id, "#failed-tasks-table")
	b.until(t, "the failed task listed", present(`#failed-tasks-table tr[data-task-id="1"] a.task-link`))
	b.do(t, "open the task from the failed list", chromedp.Click(chromedp.CSS(`#failed-tasks-table tr[data-task-id="1"] a.task-link`)))
	taskURL := "/ui/jobs/" + id + "/tasks/1"
	b.until(t, "the task's page", fmt.Sprintf(`location.pathname === %q && document.querySelectorAll('#attempts-table tr[data-attempt]').length === 2`, taskURL))
	outcomes := eval[[]string](t, b, `[...document.querySelectorAll('#attempts-table tr[data-attempt] .badge')].map(e => e.textContent)`)
	require.Equal(t, []string{"retried", "failed"}, outcomes)
	require.Contains(t, eval[string](t, b, `document.querySelector('#task-payload pre').textContent`), `"note": "<b>text</b>"`, "the payload, as text")
	require.False(t, eval[bool](t, b, present("#task-payload b")), "a payload is text, never HTML")
	tracebacks := eval[[]string](t, b, `[...document.querySelectorAll('#attempts-table pre.traceback')].map(e => e.textContent)`)
	require.Len(t, tracebacks, 2, "each run's stack")
	for _, tb := range tracebacks {
		require.Contains(t, tb, "panic: panicky: planned panic on attempt")
		require.Contains(t, tb, "goroutine ")
	}
	require.True(t, eval[bool](t, b, `document.querySelector('#attempts-table tr[data-traceback="2"] details').open`), "the last run's traceback is unfolded")
	b.until(t, "the dead letter", `document.querySelector('#task-dead-letter')?.innerText.includes('retries_exhausted')`)
	require.Equal(t, "failed", eval[string](t, b, `document.querySelector('#task-title .badge').textContent`))
	b.screenshot(t, "11-task-whole")
	b.colorScheme(t, "dark")
	b.screenshot(t, "12-task-whole-dark")
	b.colorScheme(t, "light")

	b.do(t, "back to the job", chromedp.Click(chromedp.CSS("a.back")))
	b.until(t, "the task table", present(`#tasks-table tr[data-task-id="1"] a.task-link`))
	b.do(t, "open the task from the task table", chromedp.Click(chromedp.CSS(`#tasks-table tr[data-task-id="1"] a.task-link`)))
	b.until(t, "the task's page again", fmt.Sprintf(`location.pathname === %q && document.querySelector('#attempts-table') !== null`, taskURL))

	b.open(t, in.url+"/ui/deadletters?job_id="+id, "#dl-table")
	b.until(t, "its dead letter listed", fmt.Sprintf(`document.querySelector('#dl-table tr[data-job-id=%q] a.task-link') !== null`, id))
	b.do(t, "open the task from its dead letter", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dl-table tr[data-job-id=%q] a.task-link`, id))))
	b.until(t, "the task's page from the dead letters", fmt.Sprintf(`location.pathname === %q && document.querySelectorAll('#attempts-table tr[data-attempt]').length === 2`, taskURL))

	b.open(t, in.url+"/ui/jobs/"+id+"/tasks/9", "#task-error")
	require.Contains(t, eval[string](t, b, `document.querySelector('#task-error').textContent`), "not found")
	require.Empty(t, b.jsErrors(), "the page logged errors")
}
