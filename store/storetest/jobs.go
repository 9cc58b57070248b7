package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testMigrate(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AgainIsANoOp", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)

		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.Migrate(t.Context()))

		requireSameJob(t, job, getJob(t, s, job.ID))
		require.Len(t, allTasks(t, s, job.ID, ""), 2)
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = s.Migrate(t.Context()) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		newJob(t, s, 1)
	})

	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NoError(t, s.Ping(t.Context()))
	})
}

// countIf counts the elements of xs that f holds for.
func countIf[T any](xs []T, f func(T) bool) int {
	n := 0
	for _, x := range xs {
		if f(x) {
			n++
		}
	}
	return n
}

func testCreateJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ConcurrentCreatesEachGetTheirOwn", func(t *testing.T) {
		// Creates at once, as a busy API makes them: a store may write
		// them in one transaction (group commit), but each gets its own
		// answer: new jobs with their own tasks, replays of one key the
		// job the first made, an id taken a conflict of its own.
		t.Parallel()
		s := newStore(t)
		taken := ulid.Make().String()
		type answer struct {
			kind    string
			n       int
			job     warren.Job
			created bool
			err     error
		}
		answers := make(chan answer, 60)
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spec, kind := store.NewJob{Type: "test"}, "new"
				switch i % 3 {
				case 1:
					spec.IdempotencyKey, kind = "same-key", "keyed"
				case 2:
					spec.ID, kind = taken, "id"
				}
				n := 1 + i%7
				job, created, err := s.CreateJob(t.Context(), spec, payloads(n))
				answers <- answer{kind, n, job, created, err}
			}()
		}
		wg.Wait()
		close(answers)
		var keyed, withID []answer
		for a := range answers {
			switch a.kind {
			case "new":
				require.NoError(t, a.err)
				require.True(t, a.created)
				require.Equal(t, int64(a.n), a.job.ExpectedTasks)
				require.Equal(t, int64(a.n), getJob(t, s, a.job.ID).ExpectedTasks)
				require.Len(t, allTasks(t, s, a.job.ID, ""), a.n)
			case "keyed":
				require.NoError(t, a.err)
				keyed = append(keyed, a)
			case "id":
				withID = append(withID, a)
			}
		}
		first := slices.IndexFunc(keyed, func(a answer) bool { return a.created })
		require.GreaterOrEqual(t, first, 0, "one keyed create made the job")
		for _, a := range keyed {
			require.Equal(t, keyed[first].job.ID, a.job.ID, "every keyed create answers with the first's job")
		}
		require.Equal(t, 1, countIf(keyed, func(a answer) bool { return a.created }), "one keyed create made the job")
		require.Len(t, allTasks(t, s, keyed[first].job.ID, ""), keyed[first].n)
		require.Equal(t, 1, countIf(withID, func(a answer) bool { return a.err == nil && a.created }), "one create took the id")
		for _, a := range withID {
			if a.err != nil {
				require.ErrorIs(t, a.err, warren.ErrConflict, "the others conflict")
			}
		}
		require.Equal(t, 0, countIf(withID, func(a answer) bool { return a.err == nil && !a.created }), "an id taken is no replay")
	})

	t.Run("RecordsJobAndTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		policy := warren.Policy{Reduce: "collect", MaxRetries: 5, ToleratedFailures: 2, ToleratedFailurePercent: 12.5, FailFast: true, BatchSize: 32}
		metadata := json.RawMessage(`{"owner": "ann", "tags": ["a", "b"]}`)

		job, created, err := s.CreateJob(t.Context(), store.NewJob{Type: "resize", Policy: policy, Metadata: metadata}, payloads(3))
		require.NoError(t, err)
		require.True(t, created)

		_, err = ulid.ParseStrict(job.ID)
		require.NoError(t, err, "a job created without an id gets a ULID")
		require.Equal(t, "resize", job.Type)
		require.Equal(t, warren.JobPending, job.State)
		require.Equal(t, int64(3), job.ExpectedTasks)
		require.Zero(t, job.CompletedTasks)
		require.Zero(t, job.FailedTasks)
		require.Equal(t, policy, job.Policy)
		require.JSONEq(t, string(metadata), string(job.Metadata))
		require.Empty(t, job.IdempotencyKey)
		requireRecent(t, &job.CreatedAt, "CreatedAt")
		require.Nil(t, job.StartedAt)
		require.Nil(t, job.FinishedAt)
		require.Empty(t, job.ResultLocation)
		require.Empty(t, job.Error)
		requireSameJob(t, job, getJob(t, s, job.ID))

		tasks := allTasks(t, s, job.ID, "")
		require.Equal(t, []int64{1, 2, 3}, taskIDs(tasks))
		for _, task := range tasks {
			require.Equal(t, job.ID, task.JobID)
			require.Equal(t, warren.TaskPending, task.State)
			require.Zero(t, task.Attempts)
			require.Nil(t, task.QueuedAt)
			require.Nil(t, task.StartedAt)
			require.Nil(t, task.FinishedAt)
			require.Empty(t, task.Result)
		}
	})

	t.Run("KeepsGivenID", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{ID: "job-given-id"}, 1)
		require.Equal(t, "job-given-id", job.ID)
		require.Equal(t, "job-given-id", getJob(t, s, "job-given-id").ID)
	})

	t.Run("GeneratesDistinctIDs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first, second := newJob(t, s, 1), newJob(t, s, 1)
		require.NotEqual(t, first.ID, second.ID)
	})

	t.Run("IdempotencyKeyReturnsFirstJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := createJob(t, s, store.NewJob{Type: "first", IdempotencyKey: "key-1"}, 2)
		require.Equal(t, "key-1", first.IdempotencyKey)

		consumed := false
		tasks := func(yield func(json.RawMessage, error) bool) {
			consumed = true
			yield(json.RawMessage(`{}`), nil)
		}
		again, created, err := s.CreateJob(t.Context(), store.NewJob{Type: "second", IdempotencyKey: "key-1"}, tasks)
		require.NoError(t, err)
		require.False(t, created)
		require.False(t, consumed, "the tasks of a repeated submission are not read")
		requireSameJob(t, first, again)

		jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Equal(t, []string{first.ID}, jobIDs(jobs), "nothing was written")
		require.Len(t, allTasks(t, s, first.ID, ""), 2)

		other := createJob(t, s, store.NewJob{IdempotencyKey: "key-2"}, 1)
		require.NotEqual(t, first.ID, other.ID, "another key is another job")
	})

	// The same key with another request is not a replay: it is refused,
	// and nothing is read or written (Stripe's rule).
	t.Run("IdempotencyKeyWithAnotherRequestIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := createJob(t, s, store.NewJob{Type: "first", IdempotencyKey: "key-h", RequestHash: "aaa"}, 2)

		consumed := false
		tasks := func(yield func(json.RawMessage, error) bool) {
			consumed = true
			yield(json.RawMessage(`{}`), nil)
		}
		_, created, err := s.CreateJob(t.Context(), store.NewJob{Type: "first", IdempotencyKey: "key-h", RequestHash: "bbb"}, tasks)
		require.ErrorIs(t, err, store.ErrKeyReused)
		require.ErrorIs(t, err, warren.ErrConflict)
		require.False(t, created)
		require.False(t, consumed, "the tasks of a refused submission are not read")

		again, created, err := s.CreateJob(t.Context(), store.NewJob{Type: "first", IdempotencyKey: "key-h", RequestHash: "aaa"}, tasks)
		require.NoError(t, err, "the same request again is a replay")
		require.False(t, created)
		requireSameJob(t, first, again)
		again, _, err = s.CreateJob(t.Context(), store.NewJob{Type: "first", IdempotencyKey: "key-h"}, tasks)
		require.NoError(t, err, "a request without a digest matches any")
		requireSameJob(t, first, again)

		jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Equal(t, []string{first.ID}, jobIDs(jobs), "nothing was written")
	})

	t.Run("IdempotencyKeyConcurrent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const callers = 8
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			jobs    = make([]warren.Job, callers)
			created = make([]bool, callers)
			errs    = make([]error, callers)
		)
		for i := range callers {
			wg.Go(func() {
				<-start
				jobs[i], created[i], errs[i] = s.CreateJob(t.Context(), store.NewJob{IdempotencyKey: "same"}, payloads(3))
			})
		}
		close(start)
		wg.Wait()
		var n int
		for i := range callers {
			require.NoError(t, errs[i])
			require.Equal(t, jobs[0].ID, jobs[i].ID, "every caller gets the one job")
			if created[i] {
				n++
			}
		}
		require.Equal(t, 1, n, "exactly one caller creates the job")
		listed, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Len(t, listed, 1)
		require.Len(t, allTasks(t, s, jobs[0].ID, ""), 3)
	})

	for _, failAt := range []int{0, 3, 1200} {
		t.Run("IteratorErrorWritesNothing/after"+strconv.Itoa(failAt), func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			errPayload := errors.New("bad payload")
			tasks := func(yield func(json.RawMessage, error) bool) {
				for i := range failAt {
					if !yield(payload(int64(i+1)), nil) {
						return
					}
				}
				yield(nil, errPayload)
			}
			spec := store.NewJob{ID: "broken", Type: "test", IdempotencyKey: "retry-me"}
			_, _, err := s.CreateJob(t.Context(), spec, tasks)
			require.ErrorIs(t, err, errPayload)

			_, err = s.GetJob(t.Context(), "broken")
			require.ErrorIs(t, err, warren.ErrNotFound)
			jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
			require.NoError(t, err)
			require.Empty(t, jobs)
			require.Empty(t, relayAll(t, s), "no task row was left behind")

			job, created, err := s.CreateJob(t.Context(), spec, payloads(2))
			require.NoError(t, err)
			require.True(t, created, "the idempotency key was not taken by the failed attempt")
			require.Equal(t, []int64{1, 2}, taskIDs(allTasks(t, s, job.ID, "")))
		})
	}

	t.Run("InvalidPolicyWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := createJob(t, s, store.NewJob{IdempotencyKey: "taken"}, 1)
		for _, policy := range []warren.Policy{
			{MaxRetries: -1},
			{ToleratedFailures: -1},
			{ToleratedFailurePercent: 101},
			{TaskTimeout: time.Millisecond},
			{BatchSize: warren.MaxBatchSize + 1},
			{Retention: time.Millisecond},
		} {
			want := policy.Validate()
			require.Error(t, want, "policy %+v is invalid", policy)
			for _, key := range []string{"", "taken"} {
				consumed := false
				tasks := func(yield func(json.RawMessage, error) bool) {
					consumed = true
					yield(payload(1), nil)
				}
				_, created, err := s.CreateJob(t.Context(), store.NewJob{ID: "invalid", Type: "test", Policy: policy, IdempotencyKey: key}, tasks)
				require.ErrorContains(t, err, want.Error(), "policy %+v, idempotency key %q", policy, key)
				require.False(t, created)
				require.False(t, consumed, "the tasks of an invalid job are not read")
			}
		}
		_, err := s.GetJob(t.Context(), "invalid")
		require.ErrorIs(t, err, warren.ErrNotFound)
		jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Equal(t, []string{first.ID}, jobIDs(jobs), "nothing was written")
	})

	t.Run("TakenIDIsConflict", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := createJob(t, s, store.NewJob{ID: "taken-id"}, 2)
		_, created, err := s.CreateJob(t.Context(), store.NewJob{ID: "taken-id", Type: "other"}, payloads(3))
		require.ErrorIs(t, err, warren.ErrConflict)
		require.False(t, created)
		requireSameJob(t, first, getJob(t, s, "taken-id"))
		require.Equal(t, []int64{1, 2}, taskIDs(allTasks(t, s, "taken-id", "")), "the first job's tasks only")
	})

	// A submission whose idempotency key names a job is a replay of it,
	// whatever id it asks for: a client retrying with an explicit id gets
	// its job back, not a conflict.
	t.Run("IdempotencyKeyComesBeforeTheID", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := createJob(t, s, store.NewJob{ID: "keyed", IdempotencyKey: "key-id"}, 2)
		for _, id := range []string{"keyed", "another-id"} {
			again, created, err := s.CreateJob(t.Context(), store.NewJob{ID: id, Type: "test", IdempotencyKey: "key-id"}, payloads(1))
			require.NoError(t, err, "id %q", id)
			require.False(t, created)
			requireSameJob(t, first, again)
		}
		_, err := s.GetJob(t.Context(), "another-id")
		require.ErrorIs(t, err, warren.ErrNotFound)
		require.Len(t, allTasks(t, s, "keyed", ""), 2)
	})

	// A missing payload is JSON null, the same in every store, so that a
	// worker always decodes one.
	t.Run("EmptyPayloadIsJSONNull", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		tasks := func(yield func(json.RawMessage, error) bool) {
			_ = yield(nil, nil) && yield(json.RawMessage{}, nil) && yield(payload(3), nil)
		}
		job, created, err := s.CreateJob(t.Context(), store.NewJob{Type: "test"}, tasks)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, int64(3), job.ExpectedTasks)
		offered := relayAll(t, s)
		require.Len(t, offered, 3)
		for i, want := range []string{"null", "null", string(payload(3))} {
			require.Equal(t, want, string(offered[i].Payload), "task %d", i+1)
		}
	})

	t.Run("HundredThousandTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const n = 100_000
		start := time.Now()
		job := newJob(t, s, n)
		t.Logf("CreateJob with %d tasks took %v", n, time.Since(start))
		require.Equal(t, int64(n), job.ExpectedTasks)
		require.Equal(t, int64(n), getJob(t, s, job.ID).ExpectedTasks)

		page, next, err := s.ListTasks(t.Context(), job.ID, store.ListTasksOpts{})
		require.NoError(t, err)
		require.Len(t, page, store.DefaultPageSize, "Limit 0 means the default page size")
		require.NotEmpty(t, next)
		page, _, err = s.ListTasks(t.Context(), job.ID, store.ListTasksOpts{Cursor: next, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{store.DefaultPageSize + 1, store.DefaultPageSize + 2}, taskIDs(page))

		var want int64 = 1
		err = s.ScanResults(t.Context(), job.ID, func(taskID int64, state warren.TaskState, _ json.RawMessage) error {
			require.Equal(t, want, taskID)
			require.Equal(t, warren.TaskPending, state)
			want++
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, int64(n+1), want, "every task was written")

		offered := relay(t, s, 2)
		require.Len(t, offered, 2)
		require.JSONEq(t, string(payload(2)), string(offered[1].Payload))
	})
}

func testGetJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("UnknownIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.GetJob(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound)
	})
}

func testListJobs(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("NewestFirstInPages", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var newestFirst []string
		for range 7 {
			newestFirst = append([]string{newJob(t, s, 1).ID}, newestFirst...)
		}

		require.Equal(t, [][]string{newestFirst[:3], newestFirst[3:6], newestFirst[6:]},
			listJobPages(t, s, store.ListJobsOpts{Limit: 3}))
		require.Equal(t, [][]string{newestFirst}, listJobPages(t, s, store.ListJobsOpts{}),
			"Limit 0 means a page of 100")
		require.Equal(t, [][]string{newestFirst}, listJobPages(t, s, store.ListJobsOpts{Limit: 7}),
			"a full last page has no next cursor")
	})

	t.Run("StateFilter", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var pending, cancelled []string // newest first
		for i := range 7 {
			job := newJob(t, s, 1)
			if i%2 == 1 {
				_, err := s.CancelJob(t.Context(), job.ID)
				require.NoError(t, err)
				cancelled = append([]string{job.ID}, cancelled...)
			} else {
				pending = append([]string{job.ID}, pending...)
			}
		}

		require.Equal(t, [][]string{pending[:2], pending[2:]},
			listJobPages(t, s, store.ListJobsOpts{State: warren.JobPending, Limit: 2}))
		require.Equal(t, [][]string{cancelled[:2], cancelled[2:]},
			listJobPages(t, s, store.ListJobsOpts{State: warren.JobCancelled, Limit: 2}))
		require.Equal(t, [][]string{nil}, listJobPages(t, s, store.ListJobsOpts{State: warren.JobRunning}))
	})

	t.Run("TypeFilter", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var echo, cancelledEcho, other []string // newest first
		for i := range 7 {
			typ := "echo"
			if i%3 == 2 {
				typ = "echo2" // a type the filter must not match as a prefix
			}
			job := createJob(t, s, store.NewJob{Type: typ}, 1)
			switch {
			case typ != "echo":
				other = append([]string{job.ID}, other...)
			case i == 3:
				_, err := s.CancelJob(t.Context(), job.ID)
				require.NoError(t, err)
				cancelledEcho = append([]string{job.ID}, cancelledEcho...)
				echo = append([]string{job.ID}, echo...)
			default:
				echo = append([]string{job.ID}, echo...)
			}
		}

		require.Equal(t, [][]string{echo[:3], echo[3:]}, listJobPages(t, s, store.ListJobsOpts{Type: "echo", Limit: 3}))
		require.Equal(t, [][]string{other}, listJobPages(t, s, store.ListJobsOpts{Type: "echo2"}))
		require.Equal(t, [][]string{cancelledEcho},
			listJobPages(t, s, store.ListJobsOpts{Type: "echo", State: warren.JobCancelled}), "type and state together")
		require.Equal(t, [][]string{nil}, listJobPages(t, s, store.ListJobsOpts{Type: "ech"}))
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		jobs, next, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Empty(t, jobs)
		require.Empty(t, next)
	})
}

// listJobPages pages through ListJobs with opts and returns the job ids of
// each page; it fails on a repeated job.
func listJobPages(t *testing.T, s store.Store, opts store.ListJobsOpts) [][]string {
	t.Helper()
	var pages [][]string
	seen := make(map[string]bool)
	for {
		jobs, next, err := s.ListJobs(t.Context(), opts)
		require.NoError(t, err)
		if opts.Limit > 0 {
			require.LessOrEqual(t, len(jobs), opts.Limit)
		}
		for _, job := range jobs {
			require.False(t, seen[job.ID], "job %s listed twice", job.ID)
			seen[job.ID] = true
			if opts.State != "" {
				require.Equal(t, opts.State, job.State)
			}
			if opts.Type != "" {
				require.Equal(t, opts.Type, job.Type)
			}
		}
		pages = append(pages, jobIDs(jobs))
		if len(jobs) == 0 {
			pages[len(pages)-1] = nil
		}
		if next == "" {
			return pages
		}
		require.NotEmpty(t, jobs, "a page with a next cursor has jobs")
		opts.Cursor = next
	}
}

func testListTasks(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("TaskOrderStateFilterAndPages", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 10)
		relay(t, s, 6)
		report := apply(t, s,
			completed(job.ID, 2, `2`), completed(job.ID, 5, `5`), completed(job.ID, 7, `7`), failed(job.ID, 3, "boom"))
		require.Equal(t, 4, report.Applied)

		pages := func(opts store.ListTasksOpts) [][]int64 {
			var pages [][]int64
			for {
				tasks, next, err := s.ListTasks(t.Context(), job.ID, opts)
				require.NoError(t, err)
				for _, task := range tasks {
					require.Equal(t, job.ID, task.JobID)
					if opts.State != "" {
						require.Equal(t, opts.State, task.State)
					}
				}
				pages = append(pages, taskIDs(tasks))
				if next == "" {
					return pages
				}
				opts.Cursor = next
			}
		}
		require.Equal(t, [][]int64{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}}, pages(store.ListTasksOpts{Limit: 4}))
		require.Equal(t, [][]int64{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, pages(store.ListTasksOpts{}))
		require.Equal(t, [][]int64{{2, 5}, {7}}, pages(store.ListTasksOpts{State: warren.TaskCompleted, Limit: 2}))
		require.Equal(t, [][]int64{{1, 4, 6}}, pages(store.ListTasksOpts{State: warren.TaskQueued, Limit: 3}))
		require.Equal(t, [][]int64{{8, 9, 10}}, pages(store.ListTasksOpts{State: warren.TaskPending}))
		require.Equal(t, [][]int64{{3}}, pages(store.ListTasksOpts{State: warren.TaskFailed}))
		require.Equal(t, [][]int64{{}}, pages(store.ListTasksOpts{State: warren.TaskCancelled}))
	})

	t.Run("UnknownJobIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, _, err := s.ListTasks(t.Context(), "no-such-job", store.ListTasksOpts{})
		require.ErrorIs(t, err, warren.ErrNotFound)
	})
}

func testCancelJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("OpenJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 4)
		relay(t, s, 2)
		other := newJob(t, s, 1)
		apply(t, s, completed(job.ID, 1, `1`))

		cancelled, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.JobCancelled, cancelled.State)
		require.Equal(t, job.ID, cancelled.ID)
		require.Equal(t, store.CancelledError, cancelled.Error, "the job says why it closed")
		requireSameJob(t, cancelled, getJob(t, s, job.ID))
		require.Equal(t, int64(1), cancelled.CompletedTasks, "counters stay as they were")
		require.Zero(t, cancelled.FailedTasks)
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskCancelled, warren.TaskCancelled, warren.TaskCancelled},
			taskStates(t, s, job.ID), "queued and pending tasks are cancelled")

		require.Equal(t, refs(other.ID, 1), offeredRefs(relayAll(t, s)),
			"the cancelled job's tasks are never offered")
		ids, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, ids)
	})

	t.Run("ClosedJobIsConflict", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		_, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		_, err = s.CancelJob(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrConflict, "cancelling twice")
		require.Equal(t, warren.JobCancelled, getJob(t, s, job.ID).State)

		done := newJob(t, s, 1)
		apply(t, s, completed(done.ID, 1, `1`))
		ok, err := s.FinishJob(t.Context(), done.ID, getJob(t, s, done.ID).Version, warren.JobCompleted, []byte(`[1]`), "")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.CancelJob(t.Context(), done.ID)
		require.ErrorIs(t, err, warren.ErrConflict, "cancelling a completed job")
		require.Equal(t, warren.JobCompleted, getJob(t, s, done.ID).State)
	})

	t.Run("UnknownIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.CancelJob(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound)
	})
}
