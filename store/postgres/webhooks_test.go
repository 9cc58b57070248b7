package postgres_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

// Servers sharing one database claim webhook deliveries at once: each
// delivery goes to one of them, and none is left behind.
func TestServersClaimEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs = 40
	for range jobs {
		job, _, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t",
			Webhook: &store.Webhook{URL: "https://hooks.example.com/", Secret: "s"}}, payloads(1))
		require.NoError(t, err)
		_, err = b.store.CancelJob(b.ctx, job.ID)
		require.NoError(t, err)
	}
	servers := []store.Store{b.store, open(t, b.url), open(t, b.url)}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		claims = map[string]int{}
		errs   []error
	)
	for i := range 9 {
		wg.Go(func() {
			for {
				c, err := servers[i%len(servers)].ClaimDeliveries(b.ctx, store.DeliveryClaim{Now: time.Now(), Lease: time.Hour, Limit: 3})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, d := range c {
					claims[d.ID]++
				}
				mu.Unlock()
				if err != nil || len(c) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, claims, jobs, "every delivery was claimed")
	for id, n := range claims {
		require.Equal(t, 1, n, "delivery %s went to one server", id)
	}
	n, err := b.store.PendingDeliveries(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, jobs, n, "claimed is still pending until recorded")
}
