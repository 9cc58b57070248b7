package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

// The job page's Pause and Resume buttons: a running job paused from its
// page shows the pause (a badge, why it waits, the Resume button), the
// store has it, and once resumed from the page it completes. The queues
// page lists a paused queue.
func TestDashboardPausesAndResumesAJob(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	in := startInstallation(t)
	// 24 tasks of 1 s on a worker of 4 slots: six waves, so the click
	// lands long before the last wave starts even on a loaded machine
	// (tasks of 150 ms let the job finish before the click in CI).
	tasks := `{"ms":1000}`
	for range 23 {
		tasks += `,{"ms":1000}`
	}
	id := in.submit(t, `{"type":"sleep","tasks":[`+tasks+`]}`)

	b.open(t, in.url+"/ui/jobs/"+id, "#token-form")
	b.signIn(t, writeToken)
	b.until(t, "the job runs", `document.querySelector('#job-title .badge')?.textContent === 'running'`)
	b.do(t, "pause from the page", chromedp.Click(chromedp.CSS("#action-pause")))
	b.until(t, "paused badge and Resume", `document.querySelector('#paused') !== null && document.querySelector('#action-resume') !== null &&
		document.querySelector('#action-pause') === null`)
	b.until(t, "why it waits", `document.querySelector('#job-error')?.textContent.startsWith('Paused for') &&
		document.querySelector('#job-error').className === 'warn-text'`)
	require.True(t, in.job(t, id).Paused, "paused in the store")
	b.screenshot(t, "11-job-paused")
	b.open(t, in.url+"/ui/jobs", "#jobs-table")
	b.until(t, "the jobs list says paused", fmt.Sprintf(`document.querySelector('tr[data-job-id=%q] .state-paused')?.textContent === 'paused'`, id))
	b.screenshot(t, "11b-jobs-one-paused")

	b.open(t, in.url+"/ui/queues", "#pause-queue-form")
	b.do(t, "pause a queue from the page", chromedp.SendKeys(chromedp.CSS("#pause-queue-name"), "gpu"),
		chromedp.Click(chromedp.CSS("#pause-queue-form button[type=submit]")))
	b.until(t, "the paused queue listed", `document.querySelector('#paused-queues [data-paused-queue="gpu"]') !== null`)
	b.screenshot(t, "12-queues-one-paused")
	b.do(t, "resume the queue from the page", chromedp.Click(chromedp.CSS(`button[data-resume-queue="gpu"]`)))
	b.until(t, "no paused queue", `document.querySelector('#paused-queues') === null`)

	b.open(t, in.url+"/ui/jobs/"+id, "#action-resume")
	b.do(t, "resume from the page", chromedp.Click(chromedp.CSS("#action-resume")))
	b.until(t, "Pause again", `document.querySelector('#action-pause') !== null && document.querySelector('#paused') === null`)
	require.Equal(t, warren.JobCompleted, in.waitClosed(t, id))
	b.until(t, "completed", `document.querySelector('#job-title .badge')?.textContent === 'completed'`)
	got := in.job(t, id)
	require.False(t, got.Paused)
	require.EqualValues(t, 24, got.CompletedTasks)
	require.Empty(t, b.jsErrors(), "the page logged errors")
}

// pausedJob is what the pause test reads of a job.
type pausedJob struct {
	Paused         bool  `json:"paused"`
	CompletedTasks int64 `json:"completed_tasks"`
}

// job reads job id through the API.
func (in *installation) job(t *testing.T, id string) pausedJob {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, in.url+"/v1/jobs/"+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out pausedJob
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}
