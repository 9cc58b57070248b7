package api

import (
	"net/http"
	"time"

	"github.com/warrenhq/warren/store"
)

// deliveryJSON is a webhook delivery as the API shows it.
type deliveryJSON struct {
	ID            string              `json:"id"`
	Event         string              `json:"event"`
	State         store.DeliveryState `json:"state"`
	Attempts      int                 `json:"attempts"`
	LastStatus    *int                `json:"last_status"` // null until an attempt had an answer
	LastError     string              `json:"last_error"`
	CreatedAt     time.Time           `json:"created_at"`
	NextAttemptAt *time.Time          `json:"next_attempt_at"`
	DeliveredAt   *time.Time          `json:"delivered_at"`
}

// deliveryList is the body of GET /v1/jobs/{id}/deliveries.
type deliveryList struct {
	Deliveries []deliveryJSON `json:"deliveries"`
}

// listDeliveries handles GET /v1/jobs/{id}/deliveries: the job's webhook
// deliveries, oldest first (one per close; none for a job without a
// webhook or still open).
func (s *server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	list, err := s.cfg.Store.ListDeliveries(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err, "list deliveries", "job_id", id)
		return
	}
	out := deliveryList{Deliveries: make([]deliveryJSON, 0, len(list))}
	for _, d := range list {
		dj := deliveryJSON{ID: d.ID, Event: d.Event, State: d.State, Attempts: d.Attempts, LastError: d.LastError,
			CreatedAt: d.CreatedAt.UTC(), NextAttemptAt: utc(d.NextAttemptAt), DeliveredAt: utc(d.DeliveredAt)}
		if d.LastStatus != 0 {
			status := d.LastStatus
			dj.LastStatus = &status
		}
		out.Deliveries = append(out.Deliveries, dj)
	}
	writeJSON(w, http.StatusOK, out)
}
