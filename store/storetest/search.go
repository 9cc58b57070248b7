package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// searchIDs pages through ListJobs with opts (a page of 2, so that every
// search pages) and returns the ids found, newest first.
func searchIDs(t *testing.T, s store.Store, opts store.ListJobsOpts) []string {
	t.Helper()
	if opts.Limit == 0 {
		opts.Limit = 2
	}
	return slices.Concat(listJobPages(t, s, opts)...)
}

// newestFirst returns jobs' ids, the last created first.
func newestFirst(jobs ...warren.Job) []string {
	ids := jobIDs(jobs)
	slices.Reverse(ids)
	return ids
}

func testSearch(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Fields", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		thumbs := createJob(t, s, store.NewJob{Type: "thumbnail", Policy: warren.Policy{Queue: "gpu"}}, 1)
		meta := createJob(t, s, store.NewJob{Type: "echo",
			Metadata: json.RawMessage(`{"customer": "Acme Corp", "order": {"id": 98765, "tags": ["rush", "Gift-Wrap"]}, "paid": true, "note": null}`)}, 1)
		failing := createJob(t, s, store.NewJob{Type: "echo"}, 3)
		relayAll(t, s)
		apply(t, s, failed(failing.ID, 2, "ValueError: bad pixel at (3, 4)"))
		closed := createJob(t, s, store.NewJob{Type: "echo"}, 1)
		_, err := s.CancelJob(t.Context(), closed.ID)
		require.NoError(t, err)

		for q, want := range map[string][]string{
			"thumb":         {thumbs.ID},                        // type, substring
			"THUMBNAIL":     {thumbs.ID},                        // case ignored
			"gpu":           {thumbs.ID},                        // queue
			"default":       newestFirst(meta, failing, closed), // the default queue by its name
			"acme corp":     {meta.ID},                          // a metadata value, case ignored
			"98765":         {meta.ID},                          // a nested number
			"gift-wrap":     {meta.ID},                          // in an array
			"true":          {meta.ID},                          // a boolean
			"customer":      nil,                                // keys are not values
			"null":          nil,                                // nor is null
			"bad pixel":     {failing.ID},                       // a task's error
			"(3, 4)":        {failing.ID},                       // punctuation and all
			"cancelled":     {closed.ID},                        // the job's error
			"no such thing": nil,
		} {
			require.Equal(t, want, searchIDs(t, s, store.ListJobsOpts{Search: q}), "search %q", q)
		}
		require.Equal(t, []string{meta.ID}, searchIDs(t, s, store.ListJobsOpts{Search: meta.ID[:20]}), "an id prefix")
		require.Equal(t, []string{meta.ID}, searchIDs(t, s, store.ListJobsOpts{Search: meta.ID}), "a whole id")
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Search: meta.ID[1:12]}), "an id matches by prefix only")
	})

	t.Run("Wildcards", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		pct := createJob(t, s, store.NewJob{Metadata: json.RawMessage(`{"v": "100% done_now"}`)}, 1)
		createJob(t, s, store.NewJob{Metadata: json.RawMessage(`{"v": "1000 doneXnow"}`)}, 1)
		createJob(t, s, store.NewJob{Metadata: json.RawMessage(`{"v": "say \"hi\" \\ there"}`)}, 1)
		require.Equal(t, []string{pct.ID}, searchIDs(t, s, store.ListJobsOpts{Search: "0% d"}), "%% is a character")
		require.Equal(t, []string{pct.ID}, searchIDs(t, s, store.ListJobsOpts{Search: "done_now"}), "_ is a character")
		require.Len(t, searchIDs(t, s, store.ListJobsOpts{Search: `"hi" \ t`}), 1, "quotes and backslashes are characters")
	})

	t.Run("TaskErrorsFollowTheTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{ToleratedFailures: 5}}, 2)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "disk quota exceeded"), completed(job.ID, 2, "2"))
		require.Equal(t, []string{job.ID}, searchIDs(t, s, store.ListJobsOpts{Search: "quota"}))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`1`), "")

		_, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "connection reset by peer"))
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Search: "quota"}), "the error the task no longer has")
		require.Equal(t, []string{job.ID}, searchIDs(t, s, store.ListJobsOpts{Search: "reset by"}))
	})

	t.Run("DeletedJobsAreNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Type: "deleteme"}, 2)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "kaboom"), failed(job.ID, 2, "kaboom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "2 tasks failed")
		require.Equal(t, []string{job.ID}, searchIDs(t, s, store.ListJobsOpts{Search: "kaboom"}))
		require.NoError(t, s.DeleteJob(t.Context(), job.ID))
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Search: "kaboom"}), "before its tasks are purged")
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Search: "deleteme"}))
		_, err := s.PurgeDeletedTasks(t.Context(), 0)
		require.NoError(t, err)
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Search: "kaboom"}), "after")
	})

	t.Run("WithFilters", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var all []warren.Job
		for i := range 6 {
			spec := store.NewJob{Type: "resize", Metadata: json.RawMessage(`{"batch": "nightly"}`)}
			if i%2 == 1 {
				spec.Policy.Queue = "gpu"
			}
			if i == 4 {
				spec.Type = "crop"
			}
			all = append(all, createJob(t, s, spec, 1))
		}
		createJob(t, s, store.NewJob{Type: "resize"}, 1) // not nightly
		_, err := s.CancelJob(t.Context(), all[3].ID)
		require.NoError(t, err)

		require.Equal(t, newestFirst(all...), searchIDs(t, s, store.ListJobsOpts{Search: "nightly"}))
		require.Equal(t, newestFirst(all[1], all[3], all[5]),
			searchIDs(t, s, store.ListJobsOpts{Search: "nightly", Queue: "gpu"}))
		require.Equal(t, newestFirst(all[0], all[2], all[4]),
			searchIDs(t, s, store.ListJobsOpts{Search: "nightly", Queue: "default"}), "the default queue")
		require.Equal(t, newestFirst(all[0], all[1], all[2], all[3], all[5]),
			searchIDs(t, s, store.ListJobsOpts{Search: "nightly", Type: "resize"}))
		require.Equal(t, []string{all[3].ID},
			searchIDs(t, s, store.ListJobsOpts{Search: "nightly", State: warren.JobCancelled}))
		require.Equal(t, newestFirst(all[1], all[5]),
			searchIDs(t, s, store.ListJobsOpts{Search: "nightly", Queue: "gpu", State: warren.JobPending}))
		require.Equal(t, newestFirst(all[0], all[2]),
			searchIDs(t, s, store.ListJobsOpts{Queue: "default", Type: "resize", Search: "nightly"}))
		require.Len(t, searchIDs(t, s, store.ListJobsOpts{Queue: "default"}), 4, "the queue alone")
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Queue: "gp"}), "a queue matches exactly")
	})

	t.Run("CreatedRange", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var jobs []warren.Job
		for range 5 {
			jobs = append(jobs, createJob(t, s, store.NewJob{Type: "ranged"}, 1))
		}
		from, to := jobs[1].CreatedAt, jobs[3].CreatedAt
		// Two jobs may share a microsecond: what is expected is what
		// their times say.
		within := func(after, before time.Time) []string {
			var ids []string
			for _, j := range slices.Backward(jobs) {
				if (after.IsZero() || !j.CreatedAt.Before(after)) && (before.IsZero() || j.CreatedAt.Before(before)) {
					ids = append(ids, j.ID)
				}
			}
			return ids
		}
		require.Contains(t, searchIDs(t, s, store.ListJobsOpts{CreatedAfter: from}), jobs[1].ID, "created_after is inclusive")
		require.NotContains(t, searchIDs(t, s, store.ListJobsOpts{CreatedBefore: to}), jobs[3].ID, "created_before is exclusive")
		require.Equal(t, within(from, time.Time{}), searchIDs(t, s, store.ListJobsOpts{CreatedAfter: from}))
		require.Equal(t, within(time.Time{}, to), searchIDs(t, s, store.ListJobsOpts{CreatedBefore: to}))
		require.Equal(t, within(from, to), searchIDs(t, s, store.ListJobsOpts{CreatedAfter: from, CreatedBefore: to, Search: "ranged"}))
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{CreatedAfter: to, CreatedBefore: from}), "an empty range")
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{CreatedAfter: jobs[4].CreatedAt.Add(time.Millisecond)}))
	})

	t.Run("InvalidText", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, q := range []string{"ab", "a\x00b", "tab\there", "\xff\xfe\xfd", strings.Repeat("x", store.MaxSearchBytes+1)} {
			_, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{Search: q})
			require.Error(t, err, "search %q", q)
			require.ErrorContains(t, err, "search text", "search %q", q)
		}
		_, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{Search: "äöü"})
		require.NoError(t, err, "three characters, however many bytes")
	})

	t.Run("PastTheNewestJobs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// A driver may look at the newest engine.SearchRecentRows jobs
		// first: matches older than those are found all the same, in
		// order, across pages.
		needle := func() warren.Job {
			return createJob(t, s, store.NewJob{Metadata: json.RawMessage(`{"v": "needle"}`)}, 0)
		}
		old := []warren.Job{needle(), needle(), needle()}
		for range engine.SearchRecentRows + 20 {
			createJob(t, s, store.NewJob{Metadata: json.RawMessage(`{"v": "hay"}`)}, 0)
		}
		newest := needle()
		require.Equal(t, newestFirst(append(old, newest)...), searchIDs(t, s, store.ListJobsOpts{Search: "needle"}))
		page, next, err := s.ListJobs(t.Context(), store.ListJobsOpts{Search: "hay", Limit: 50})
		require.NoError(t, err)
		require.Len(t, page, 50)
		require.NotEmpty(t, next)
	})

	t.Run("LongMetadataIsCut", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		long := strings.Repeat("a", store.MaxSearchTextBytes)
		md, err := json.Marshal(map[string]any{"a": long, "b": "zzzhidden"})
		require.NoError(t, err)
		job := createJob(t, s, store.NewJob{Type: "long", Metadata: md}, 1)
		require.Equal(t, []string{job.ID}, searchIDs(t, s, store.ListJobsOpts{Search: "aaaa"}))
		require.Nil(t, searchIDs(t, s, store.ListJobsOpts{Search: "zzzhidden"}), "past MaxSearchTextBytes")
	})
}
