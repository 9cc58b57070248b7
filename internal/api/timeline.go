package api

import (
	"net/http"
	"time"

	"github.com/warrenhq/warren/store"
)

// timelineJSON is the body of GET /v1/jobs/{id}/timeline.
type timelineJSON struct {
	BucketSeconds float64              `json:"bucket_seconds"`
	Buckets       []timelineBucketJSON `json:"buckets"`
}

// timelineBucketJSON is one bucket of a timeline.
type timelineBucketJSON struct {
	Start     time.Time `json:"start"`
	Completed int64     `json:"completed"`
	Failed    int64     `json:"failed"`
}

// jobTimeline handles GET /v1/jobs/{id}/timeline: how many of the job's
// tasks finished in each bucket of its life, from its creation to its
// close (or now, while it is open), in at most store.MaxTimelineBuckets
// buckets.
func (s *server) jobTimeline(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	job, err := s.cfg.Store.GetJob(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err, "get job", "job_id", id)
		return
	}
	end := time.Now()
	if job.FinishedAt != nil {
		end = *job.FinishedAt
	}
	span := store.TimelineSpanOf(job.CreatedAt, end, store.MaxTimelineBuckets)
	buckets, err := s.cfg.Store.TaskTimeline(r.Context(), id, span)
	if err != nil {
		s.storeError(w, r, err, "task timeline", "job_id", id)
		return
	}
	out := timelineJSON{BucketSeconds: span.Bucket.Seconds(), Buckets: make([]timelineBucketJSON, len(buckets))}
	for i, b := range buckets {
		out.Buckets[i] = timelineBucketJSON{Start: b.Start.UTC(), Completed: b.Completed, Failed: b.Failed}
	}
	writeJSON(w, http.StatusOK, out)
}
