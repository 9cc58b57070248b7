package storetest

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// stage2 is the follow-up spec of the tests' chains.
func stage2() *store.NewJob {
	return &store.NewJob{Type: "stage2", Policy: warren.Policy{Reduce: "collect", MaxRetries: 2, Queue: "second"},
		Metadata: json.RawMessage(`{"stage":2}`)}
}

// completeWith records a completed outcome for each of job id's n tasks
// and closes it as completed with result, returning it as it is then.
func completeWith(t *testing.T, s store.Store, id string, n int, result string) warren.Job {
	t.Helper()
	relayAll(t, s)
	outcomes := make([]store.Outcome, n)
	for i := range outcomes {
		outcomes[i] = completed(id, int64(i+1), strconv.Itoa(i+1))
	}
	apply(t, s, outcomes...)
	finish(t, s, id, warren.JobCompleted, []byte(result), "")
	return getJob(t, s, id)
}

// followUp returns the job that job id started, which must exist.
func followUp(t *testing.T, s store.Store, id string) warren.Job {
	t.Helper()
	job := getJob(t, s, id)
	require.NotEmpty(t, job.NextJob, "job %s started its follow-up", id)
	next := getJob(t, s, job.NextJob)
	require.Equal(t, id, next.PreviousJob, "the follow-up names the job that started it")
	return next
}

// countJobs is the number of jobs s holds.
func countJobs(t *testing.T, s store.Store) int64 {
	t.Helper()
	counts, err := s.CountJobs(t.Context())
	require.NoError(t, err)
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}

func testThen(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ACompletedJobStartsOneTaskPerElementInOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Then: stage2()}, 2)
		require.Empty(t, job.NextJob, "no follow-up while the job is open")
		require.Empty(t, job.PreviousJob)
		require.Equal(t, &warren.FollowUp{Type: "stage2", Policy: stage2().Policy, Metadata: json.RawMessage(`{"stage":2}`)}, getJob(t, s, job.ID).Then)

		done := completeWith(t, s, job.ID, 2, `[{"a":1}, 2, "x", null]`)
		require.Equal(t, warren.JobCompleted, done.State)
		requireResult(t, s, job.ID, `[{"a":1}, 2, "x", null]`)
		next := followUp(t, s, job.ID)
		require.Equal(t, "stage2", next.Type)
		require.Equal(t, warren.JobPending, next.State)
		require.Equal(t, int64(4), next.ExpectedTasks)
		require.Equal(t, stage2().Policy, next.Policy)
		requireSameJSON(t, json.RawMessage(`{"stage":2}`), next.Metadata, "Metadata")
		require.Nil(t, next.Then, "the chain ends with the follow-up")
		require.Empty(t, next.NextJob)

		offered := relayAll(t, s)
		require.Len(t, offered, 4, "only the follow-up's tasks are pending")
		var got []string
		for i, task := range offered {
			require.Equal(t, next.ID, task.JobID)
			require.Equal(t, int64(i+1), task.TaskID, "in the result's order")
			require.Equal(t, "stage2", task.Type)
			require.Equal(t, "second", task.Queue)
			require.Equal(t, 2, task.MaxRetries)
			got = append(got, string(task.Payload))
		}
		require.Equal(t, []string{`{"a":1}`, `2`, `"x"`, `null`}, got)
	})

	t.Run("AResultThatCannotMakeTasksFailsTheFollowUp", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		small := stage2()
		small.MaxTaskBytes = 5
		few := stage2()
		few.MaxTasks = 2
		for _, c := range []struct {
			spec           *store.NewJob
			result, reason string
		}{
			{stage2(), `{"k":[1]}`, "the previous job's result is not a JSON array (it is an object)"},
			{stage2(), `3`, "the previous job's result is not a JSON array (it is a number)"},
			{stage2(), `null`, "the previous job's result is not a JSON array (it is null)"},
			{stage2(), `[]`, "the previous job's result is an empty array: a job has at least one task"},
			{small, `[1, "too long"]`, "the previous job's result has element 2 of 10 bytes, over the limit of 5 bytes per task"},
			{few, `[1, 2, 3]`, "the previous job's result has more than 2 elements, the most tasks a job may have (WARREN_MAX_JOB_TASKS)"},
			{stage2(), `[` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `]`, "nested 70 levels deep"},
		} {
			job := createJob(t, s, store.NewJob{Then: c.spec}, 1)
			done := completeWith(t, s, job.ID, 1, c.result)
			require.Equal(t, warren.JobCompleted, done.State, "the first job stays completed: %s", c.result)
			requireResult(t, s, job.ID, c.result)
			next := followUp(t, s, job.ID)
			require.Equal(t, warren.JobFailed, next.State, c.result)
			require.Contains(t, next.Error, c.reason)
			require.NotNil(t, next.FinishedAt)
			require.Zero(t, next.ExpectedTasks)
		}
		require.Empty(t, relayAll(t, s), "no task of a failed follow-up")
	})

	t.Run("AFailedOrCancelledJobStartsNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		failing := createJob(t, s, store.NewJob{Then: stage2()}, 1)
		relayAll(t, s)
		apply(t, s, failed(failing.ID, 1, "boom"))
		finish(t, s, failing.ID, warren.JobFailed, nil, "1 of 1 tasks failed")
		require.Empty(t, getJob(t, s, failing.ID).NextJob)

		cancelled := createJob(t, s, store.NewJob{Then: stage2()}, 1)
		_, err := s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		require.Empty(t, getJob(t, s, cancelled.ID).NextJob)
		require.EqualValues(t, 2, countJobs(t, s), "no follow-up was created")
	})

	t.Run("ConcurrentClosesStartOneFollowUp", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Then: stage2()}, 1)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`))
		version := getJob(t, s, job.ID).Version
		const callers = 6
		oks := make([]bool, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				oks[i], errs[i] = s.FinishJob(t.Context(), job.ID, version, warren.JobCompleted, []byte(`[`+strconv.Itoa(i)+`]`), "")
			})
		}
		wg.Wait()
		wins := 0
		for i := range callers {
			require.NoError(t, errs[i])
			if oks[i] {
				wins++
			}
		}
		require.Equal(t, 1, wins, "one close")
		require.EqualValues(t, 2, countJobs(t, s), "one follow-up")
		require.EqualValues(t, 1, followUp(t, s, job.ID).ExpectedTasks)
	})

	t.Run("ARedriveThatCompletesAFailedJobStartsItsFollowUpThen", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Then: stage2()}, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "1 of 2 tasks failed")
		require.Empty(t, getJob(t, s, job.ID).NextJob)

		_, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, getJob(t, s, job.ID).NextJob, "a redrive starts nothing by itself")
		relayAll(t, s)
		apply(t, s, completed(job.ID, 2, `2`))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1,2]`), "")
		require.EqualValues(t, 2, followUp(t, s, job.ID).ExpectedTasks)
	})

	t.Run("AJobWithANextJobNeverStartsASecond", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		spec := store.NewJob{Then: stage2(), Policy: warren.Policy{Reduce: "collect", ToleratedFailures: 1, ToleratedFailurePercent: 50}}
		job := createJob(t, s, spec, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1,null]`), "")
		first := followUp(t, s, job.ID)

		_, _, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, first.ID, getJob(t, s, job.ID).NextJob, "a reopened job keeps its next job")
		relayAll(t, s)
		apply(t, s, completed(job.ID, 2, `2`))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1,2]`), "")
		require.Equal(t, first.ID, getJob(t, s, job.ID).NextJob, "the chain does not fork")
		require.EqualValues(t, 2, countJobs(t, s))
	})

	t.Run("AChainOfThree", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		third := &store.NewJob{Type: "stage3", Policy: warren.Policy{Reduce: "sum"}}
		second := stage2()
		second.Then = third
		job := createJob(t, s, store.NewJob{Then: second}, 1)
		require.Equal(t, 2, getJob(t, s, job.ID).Then.Length())
		completeWith(t, s, job.ID, 1, `[10, 20]`)
		two := followUp(t, s, job.ID)
		require.Equal(t, "stage3", two.Then.Type, "the follow-up carries the rest of the chain")
		require.Nil(t, two.Then.Then)
		completeWith(t, s, two.ID, 2, `[1, 2, 3]`)
		three := followUp(t, s, two.ID)
		require.Equal(t, "stage3", three.Type)
		require.EqualValues(t, 3, three.ExpectedTasks)
		require.Nil(t, three.Then)
		completeWith(t, s, three.ID, 3, `6`)
		require.Empty(t, getJob(t, s, three.ID).NextJob, "the chain ends")
		require.EqualValues(t, 3, countJobs(t, s))
	})

	t.Run("TheFollowUpInheritsTheWebhookAndTheTrace", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		trace := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		job := createJob(t, s, store.NewJob{Then: stage2(), Webhook: hook, TraceParent: trace, TraceState: "k=v"}, 1)
		completeWith(t, s, job.ID, 1, `[1]`)
		next := followUp(t, s, job.ID)
		require.Equal(t, hook.URL, next.WebhookURL)
		require.Equal(t, trace, next.TraceParent)
		require.Equal(t, "k=v", next.TraceState)
		relayAll(t, s)
		apply(t, s, completed(next.ID, 1, `1`))
		finish(t, s, next.ID, warren.JobCompleted, []byte(`[1]`), "")
		require.Len(t, deliveries(t, s, job.ID), 1, "each job of the chain has its delivery")
		require.Len(t, deliveries(t, s, next.ID), 1)
		claimed, err := s.ClaimDeliveries(t.Context(), store.DeliveryClaim{Now: storeNow(t, s).Add(time.Second), Lease: time.Minute, Limit: 10})
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		for _, d := range claimed {
			require.Equal(t, hook.URL, d.URL)
			require.Equal(t, hook.Secret, d.Secret, "the inherited webhook signs with the first job's secret")
		}

		own := stage2()
		own.Webhook = &store.Webhook{URL: "https://other.example.com/h", Secret: "other"}
		failing := createJob(t, s, store.NewJob{Then: own, Webhook: hook}, 1)
		completeWith(t, s, failing.ID, 1, `"not an array"`)
		bad := followUp(t, s, failing.ID)
		require.Equal(t, own.Webhook.URL, bad.WebhookURL, "a follow-up's own webhook wins")
		list := deliveries(t, s, bad.ID)
		require.Len(t, list, 1, "a follow-up created failed has its delivery")
		require.Equal(t, store.EventJobClosed, list[0].Event)
	})

	t.Run("AReduceTaskJobFeedsItsFollowUp", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		policy := warren.Policy{ReduceTask: &warren.ReduceTask{Type: "pairs"}}
		job := createJob(t, s, store.NewJob{Policy: policy, Then: stage2()}, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), completed(job.ID, 2, `2`))
		startReduce(t, s, getJob(t, s, job.ID))
		relayAll(t, s)
		apply(t, s, completed(job.ID, warren.ReduceTaskID, `[[1,2],[2,1]]`))
		task, err := s.GetTask(t.Context(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		finish(t, s, job.ID, warren.JobCompleted, task.Result, "")
		next := followUp(t, s, job.ID)
		require.EqualValues(t, 2, next.ExpectedTasks)
		offered := relayAll(t, s)
		require.Len(t, offered, 2)
		require.Equal(t, `[1,2]`, string(offered[0].Payload))
		require.Equal(t, `[2,1]`, string(offered[1].Payload))
	})

	t.Run("AnInvalidChainIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		keyed := stage2()
		keyed.IdempotencyKey = "k"
		badPolicy := stage2()
		badPolicy.Then = &store.NewJob{Type: "x", Policy: warren.Policy{MaxRetries: -1}}
		long := &store.NewJob{Type: "last"}
		for range warren.MaxChainLength - 1 {
			long = &store.NewJob{Type: "link", Then: long}
		}
		for _, c := range []struct {
			then *store.NewJob
			want string
		}{
			{keyed, "invalid then: a follow-up has no id, idempotency key or request hash of its own"},
			{badPolicy, "invalid then.then: invalid policy: max_retries"},
			{long, "invalid " + strings.Repeat("then.", warren.MaxChainLength-1) + "then: a chain holds at most 10 jobs"},
		} {
			_, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t", Then: c.then}, payloads(1))
			require.ErrorContains(t, err, c.want)
		}
		require.Zero(t, countJobs(t, s), "nothing written")
		_ = createJob(t, s, store.NewJob{Then: long.Then}, 1) // ten jobs in all
	})
}
