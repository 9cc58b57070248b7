package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// hook is the webhook of the tests' jobs.
var hook = &store.Webhook{URL: "https://hooks.example.com/warren", Secret: "s3cret"}

func testWebhooks(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("TheJobKeepsItsURL", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Webhook: hook}, 1)
		require.Equal(t, hook.URL, job.WebhookURL)
		requireSameJob(t, job, getJob(t, s, job.ID))
		require.Empty(t, newJob(t, s, 1).WebhookURL)
		list := deliveries(t, s, job.ID)
		require.NotNil(t, list, "an empty list, not nil")
		require.Empty(t, list, "no delivery while the job is open")
		_, err := s.ListDeliveries(t.Context(), "nope")
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	t.Run("AnInvalidWebhookIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, w := range []store.Webhook{{URL: "https://x"}, {Secret: "s"}, {URL: "https://x", Secret: string(make([]byte, store.MaxWebhookSecretBytes+1))}} {
			_, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t", Webhook: &w}, payloads(1))
			require.ErrorContains(t, err, "invalid webhook", "%+v", w)
		}
	})

	t.Run("FinishJobMakesOneDeliveryInItsTransaction", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{Webhook: hook}, 2)
		list := deliveries(t, s, job.ID)
		require.Len(t, list, 1)
		d := list[0]
		require.Len(t, d.ID, 26, "a ULID")
		require.Equal(t, job.ID, d.JobID)
		require.Equal(t, store.EventJobClosed, d.Event)
		require.Equal(t, store.DeliveryPending, d.State)
		require.Zero(t, d.Attempts)
		require.Zero(t, d.LastStatus)
		require.Empty(t, d.LastError)
		requireSameTime(t, job.FinishedAt, &d.CreatedAt, "a delivery is made when its job closes")
		requireSameTime(t, job.FinishedAt, d.NextAttemptAt, "and is due at once")
		require.Nil(t, d.DeliveredAt)
		require.EqualValues(t, 1, pending(t, s))

		claimed := claim(t, s, storeNow(t, s), time.Minute, 10)
		require.Len(t, claimed, 1)
		c := claimed[0]
		require.Equal(t, d.ID, c.ID)
		require.Equal(t, hook.URL, c.URL)
		require.Equal(t, hook.Secret, c.Secret)
		require.Equal(t, 1, c.Attempts, "the claim counts the attempt")
		require.Equal(t, string(engine.ClosedPayload(d.ID, job)), string(c.Body), "the body is the closed job's")
		var body struct {
			ID    string         `json:"id"`
			Event string         `json:"event"`
			Job   map[string]any `json:"job"`
		}
		require.NoError(t, json.Unmarshal(c.Body, &body))
		require.Equal(t, d.ID, body.ID)
		require.Equal(t, "job.closed", body.Event)
		require.Equal(t, job.ID, body.Job["id"])
		require.Equal(t, "completed", body.Job["state"])
		require.EqualValues(t, 2, body.Job["completed_tasks"])
		require.Equal(t, "/v1/jobs/"+job.ID+"/result", body.Job["result_url"])
	})

	t.Run("AJobWithoutWebhookMakesNone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{}, 1)
		require.Empty(t, deliveries(t, s, job.ID))
		cancelled, err := s.CancelJob(t.Context(), newJob(t, s, 1).ID)
		require.NoError(t, err)
		require.Empty(t, deliveries(t, s, cancelled.ID))
		require.Empty(t, claim(t, s, storeNow(t, s).Add(time.Hour), time.Minute, 10))
		require.Zero(t, pending(t, s))
	})

	t.Run("CancelJobMakesOne", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job, err := s.CancelJob(t.Context(), createJob(t, s, store.NewJob{Webhook: hook}, 3).ID)
		require.NoError(t, err)
		require.Len(t, deliveries(t, s, job.ID), 1)
		c := claim(t, s, storeNow(t, s), time.Minute, 10)
		require.Len(t, c, 1)
		var body struct {
			Job struct {
				State     string  `json:"state"`
				Error     string  `json:"error"`
				ResultURL *string `json:"result_url"`
			} `json:"job"`
		}
		require.NoError(t, json.Unmarshal(c[0].Body, &body))
		require.Equal(t, "cancelled", body.Job.State)
		require.Equal(t, store.CancelledError, body.Job.Error)
		require.Nil(t, body.Job.ResultURL, "no result_url but for a completed job")
	})

	t.Run("AFinishJobThatLosesMakesNone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Webhook: hook}, 1)
		stale := job.Version
		apply(t, s, completed(job.ID, 1, `1`))
		ok, err := s.FinishJob(t.Context(), job.ID, stale, warren.JobCompleted, []byte(`[1]`), "")
		require.NoError(t, err)
		require.False(t, ok)
		require.Empty(t, deliveries(t, s, job.ID))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1]`), "")
		ok, err = s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobFailed, nil, "again")
		require.NoError(t, err)
		require.False(t, ok, "a closed job does not close twice")
		require.Len(t, deliveries(t, s, job.ID), 1)
	})

	t.Run("ARedriveClosesAgainWithANewDelivery", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{Webhook: hook}, 2, 2)
		_, _, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 2, `2`))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1,2]`), "")
		list := deliveries(t, s, job.ID)
		require.Len(t, list, 2)
		require.NotEqual(t, list[0].ID, list[1].ID)
		require.Less(t, list[0].ID, list[1].ID, "oldest first")
		require.EqualValues(t, 2, pending(t, s))
	})

	t.Run("AClaimHandedBackSpendsNoAttempt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{Webhook: hook}, 1)
		now := job.FinishedAt.Add(time.Second)
		first := claim(t, s, now, time.Minute, 10)
		require.Len(t, first, 1)
		retryAt := now.Add(10 * time.Minute)
		require.True(t, record(t, s, store.DeliveryAttempt{ID: first[0].ID, Attempt: 1, State: store.DeliveryPending,
			Status: 503, Error: "HTTP 503", At: now, NextAttemptAt: retryAt}))

		second := claim(t, s, retryAt, time.Minute, 10)
		require.Len(t, second, 1)
		require.Equal(t, 2, second[0].Attempts)
		backAt := retryAt.Add(30 * time.Second)
		require.True(t, record(t, s, store.DeliveryAttempt{ID: second[0].ID, Attempt: 2, State: store.DeliveryPending,
			At: retryAt, NextAttemptAt: backAt, NotAttempted: true}))
		d := deliveries(t, s, job.ID)[0]
		require.Equal(t, store.DeliveryPending, d.State)
		require.Equal(t, 1, d.Attempts, "the hand-back gave its attempt back")
		require.Equal(t, 503, d.LastStatus, "the last real attempt's status stays")
		require.Equal(t, "HTTP 503", d.LastError, "and its error")
		requireSameTime(t, &backAt, d.NextAttemptAt, "next_attempt_at")
		require.False(t, record(t, s, store.DeliveryAttempt{ID: second[0].ID, Attempt: 2, State: store.DeliveryPending,
			At: retryAt, NextAttemptAt: backAt, NotAttempted: true}), "handed back once: its claim is over")

		third := claim(t, s, backAt, time.Minute, 10)
		require.Len(t, third, 1)
		require.Equal(t, 2, third[0].Attempts, "the next claim is the second attempt")
		_, err := s.RecordDeliveryAttempt(t.Context(), store.DeliveryAttempt{ID: third[0].ID, Attempt: 2, State: store.DeliveryFailed,
			At: backAt, NotAttempted: true})
		require.Error(t, err, "a hand-back stays pending")
	})

	t.Run("AClaimLeasesUntilRecorded", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{Webhook: hook}, 1)
		now := job.FinishedAt.Add(time.Second)
		require.Empty(t, claim(t, s, job.FinishedAt.Add(-time.Second), time.Minute, 10), "not due before it was made")
		first := claim(t, s, now, time.Minute, 10)
		require.Len(t, first, 1)
		require.Empty(t, claim(t, s, now.Add(59*time.Second), time.Minute, 10), "leased")
		d := deliveries(t, s, job.ID)[0]
		require.Equal(t, 1, d.Attempts)
		requireSameTime(t, new(now.Add(time.Minute)), d.NextAttemptAt, "due again when the lease ends")

		// The lease passes: another claimer takes it, and the first one's
		// record is ignored.
		second := claim(t, s, now.Add(time.Minute), time.Minute, 10)
		require.Len(t, second, 1)
		require.Equal(t, 2, second[0].Attempts)
		require.Equal(t, string(first[0].Body), string(second[0].Body), "the same body")
		require.False(t, record(t, s, store.DeliveryAttempt{ID: first[0].ID, Attempt: 1, State: store.DeliveryDelivered, Status: 200, At: now}))

		retryAt := now.Add(10 * time.Minute)
		require.True(t, record(t, s, store.DeliveryAttempt{ID: first[0].ID, Attempt: 2, State: store.DeliveryPending,
			Status: 500, Error: "HTTP 500", At: now.Add(time.Minute), NextAttemptAt: retryAt}))
		d = deliveries(t, s, job.ID)[0]
		require.Equal(t, store.DeliveryPending, d.State)
		require.Equal(t, 500, d.LastStatus)
		require.Equal(t, "HTTP 500", d.LastError)
		requireSameTime(t, &retryAt, d.NextAttemptAt, "next_attempt_at")
		require.Empty(t, claim(t, s, retryAt.Add(-time.Microsecond), time.Minute, 10))

		third := claim(t, s, retryAt, time.Minute, 10)
		require.Len(t, third, 1)
		deliveredAt := retryAt.Add(time.Second)
		require.True(t, record(t, s, store.DeliveryAttempt{ID: third[0].ID, Attempt: 3, State: store.DeliveryDelivered, Status: 204, At: deliveredAt}))
		d = deliveries(t, s, job.ID)[0]
		require.Equal(t, store.DeliveryDelivered, d.State)
		require.Equal(t, 3, d.Attempts)
		require.Equal(t, 204, d.LastStatus)
		require.Empty(t, d.LastError)
		require.Nil(t, d.NextAttemptAt)
		requireSameTime(t, &deliveredAt, d.DeliveredAt, "delivered_at")
		require.Empty(t, claim(t, s, retryAt.Add(48*time.Hour), time.Minute, 10), "a delivered one is never claimed again")
		require.False(t, record(t, s, store.DeliveryAttempt{ID: third[0].ID, Attempt: 3, State: store.DeliveryFailed, At: deliveredAt}),
			"nor changed")
		require.Zero(t, pending(t, s))
	})

	// The claim takes the deliveries due the longest first, by when they
	// are due, not by when they were made.
	t.Run("AClaimTakesTheLongestDueFirst", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var made []string
		for range 3 {
			made = append(made, deliveries(t, s, closeJob(t, s, store.NewJob{Webhook: hook}, 1).ID)[0].ID)
		}
		now := storeNow(t, s)
		require.Len(t, claim(t, s, now, time.Minute, 10), 3)
		// The last made is due first, the first made last.
		for i, id := range made {
			require.True(t, record(t, s, store.DeliveryAttempt{ID: id, Attempt: 1, State: store.DeliveryPending,
				At: now, NextAttemptAt: now.Add(-time.Duration(i) * time.Hour)}))
		}
		first := claim(t, s, now, time.Minute, 2)
		require.ElementsMatch(t, []string{made[1], made[2]}, claimedIDs(first), "the two due the longest")
		require.Equal(t, []string{made[0]}, claimedIDs(claim(t, s, now, time.Minute, 2)))
		for _, c := range first {
			require.Equal(t, 2, c.Attempts)
			require.Equal(t, hook.URL, c.URL)
			require.Equal(t, hook.Secret, c.Secret)
		}
	})

	t.Run("AFailedDeliveryStaysFailed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{Webhook: hook}, 1)
		c := claim(t, s, storeNow(t, s), time.Minute, 10)
		require.Len(t, c, 1)
		require.True(t, record(t, s, store.DeliveryAttempt{ID: c[0].ID, Attempt: 1, State: store.DeliveryFailed, Error: "dial: refused\x00", At: storeNow(t, s)}))
		d := deliveries(t, s, job.ID)[0]
		require.Equal(t, store.DeliveryFailed, d.State)
		require.Equal(t, "dial: refused\uFFFD", d.LastError, "stored as valid UTF-8 without NUL")
		require.Nil(t, d.NextAttemptAt)
		require.Nil(t, d.DeliveredAt)
		require.Empty(t, claim(t, s, storeNow(t, s).Add(48*time.Hour), time.Minute, 10))
		_, err := s.RecordDeliveryAttempt(t.Context(), store.DeliveryAttempt{ID: c[0].ID, Attempt: 1, State: store.DeliveryPending})
		require.Error(t, err, "a pending attempt needs its next attempt")
		require.False(t, record(t, s, store.DeliveryAttempt{ID: "nope", Attempt: 1, State: store.DeliveryFailed}))
	})

	t.Run("DeletingAJobDeletesItsDeliveries", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		byAPI := closeJob(t, s, store.NewJob{Webhook: hook}, 1)
		expired := closeJob(t, s, store.NewJob{Webhook: hook, Policy: warren.Policy{Retention: time.Hour}}, 1)
		kept := closeJob(t, s, store.NewJob{Webhook: hook}, 1)
		require.EqualValues(t, 3, pending(t, s))
		require.NoError(t, s.DeleteJob(t.Context(), byAPI.ID))
		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: expired.FinishedAt.Add(2 * time.Hour)}, 10))
		require.EqualValues(t, 1, pending(t, s))
		for _, id := range []string{byAPI.ID, expired.ID} {
			_, err := s.ListDeliveries(t.Context(), id)
			require.ErrorIs(t, err, warren.ErrNotFound)
		}
		c := claim(t, s, storeNow(t, s), time.Minute, 10)
		require.Len(t, c, 1)
		require.Equal(t, kept.ID, c[0].JobID)
	})

	t.Run("ConcurrentClaimsNeverShareADelivery", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const jobs = 12
		for range jobs {
			closeJob(t, s, store.NewJob{Webhook: hook}, 1)
		}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			seen = map[string]int{}
			now  = storeNow(t, s)
		)
		for range 6 {
			wg.Go(func() {
				for {
					c, err := s.ClaimDeliveries(t.Context(), store.DeliveryClaim{Now: now, Lease: time.Hour, Limit: 2})
					if err != nil || len(c) == 0 {
						require.NoError(t, err)
						return
					}
					mu.Lock()
					for _, d := range c {
						seen[d.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, seen, jobs)
		for id, n := range seen {
			require.Equal(t, 1, n, "delivery %s claimed once", id)
		}
	})
}

// deliveries lists job id's deliveries.
func deliveries(t *testing.T, s store.Store, id string) []store.Delivery {
	t.Helper()
	list, err := s.ListDeliveries(t.Context(), id)
	require.NoError(t, err)
	return list
}

// storeNow reads s's clock, which wrote the deliveries' times: the
// process's clock may be behind it by a few milliseconds, enough for a
// delivery made just now not to be due yet by it.
func storeNow(t *testing.T, s store.Store) time.Time {
	t.Helper()
	now, err := s.Now(t.Context())
	require.NoError(t, err)
	return now
}

// claim claims up to limit deliveries due at now for lease.
func claim(t *testing.T, s store.Store, now time.Time, lease time.Duration, limit int) []store.ClaimedDelivery {
	t.Helper()
	c, err := s.ClaimDeliveries(t.Context(), store.DeliveryClaim{Now: now, Lease: lease, Limit: limit})
	require.NoError(t, err)
	return c
}

// claimedIDs lists the ids of claimed deliveries.
func claimedIDs(claimed []store.ClaimedDelivery) []string {
	ids := make([]string, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	return ids
}

// record records attempt a and returns whether it applied.
func record(t *testing.T, s store.Store, a store.DeliveryAttempt) bool {
	t.Helper()
	ok, err := s.RecordDeliveryAttempt(t.Context(), a)
	require.NoError(t, err)
	return ok
}

// pending counts the pending deliveries.
func pending(t *testing.T, s store.Store) int64 {
	t.Helper()
	n, err := s.PendingDeliveries(t.Context())
	require.NoError(t, err)
	return n
}
