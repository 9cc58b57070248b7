package store

import "time"

// Webhooks: a job may name a URL that warren POSTs to when the job
// closes. The delivery is written in the transaction that closes the job
// (FinishJob, CancelJob), so no close is without its delivery, and it
// waits in the store (an outbox of deliveries) until a server delivers it
// or gives up: a crash or a restart loses nothing. The rules of when to
// try again are decided in Go by the deliverer (internal/webhooks); the
// drivers only claim, record and list.

// EventJobClosed is the event of the delivery a job's close makes.
const EventJobClosed = "job.closed"

// MaxWebhookURLBytes and MaxWebhookSecretBytes bound a job's Webhook.
const (
	MaxWebhookURLBytes    = 2048
	MaxWebhookSecretBytes = 1024
)

// Webhook is where warren tells a job's owner that the job closed, and
// the secret it signs the body with. The secret is kept with the job and
// never shown: warren.Job carries only the URL (WebhookURL).
type Webhook struct {
	URL    string
	Secret string
}

// DeliveryState is the state of a webhook delivery.
type DeliveryState string

// Delivery states. A delivery is pending until a receiver answered 2xx
// (delivered) or the deliverer gave up (failed).
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered"
	DeliveryFailed    DeliveryState = "failed"
)

// Delivery is one webhook delivery as the store records it.
type Delivery struct {
	// ID is a ULID, sent as X-Warren-Delivery on every attempt.
	ID    string
	JobID string
	// Event is EventJobClosed.
	Event string
	State DeliveryState
	// Attempts counts the attempts claimed so far (an attempt in flight
	// included).
	Attempts int
	// LastStatus is the HTTP status of the last attempt's answer, 0 when
	// it had none (a network error, a timeout) or there was no attempt.
	LastStatus int
	// LastError says why the last attempt failed, "" after a success.
	LastError string
	// CreatedAt is when the delivery was made: when its job closed.
	CreatedAt time.Time
	// NextAttemptAt is when the delivery is due next (nil once delivered
	// or failed). While an attempt is in flight it is the end of the
	// attempt's lease: when another server may try again, should this
	// one be lost.
	NextAttemptAt *time.Time
	// DeliveredAt is when a receiver answered 2xx.
	DeliveredAt *time.Time
}

// ClaimedDelivery is a delivery ClaimDeliveries handed to one deliverer,
// with what its attempt needs.
type ClaimedDelivery struct {
	Delivery
	// URL and Secret are the job's webhook.
	URL    string
	Secret string
	// Body is the exact body to POST, the same bytes on every attempt:
	// the JSON of the job.closed event, with the delivery's id, the event
	// and the job as it closed (its id, type, state, counters, times,
	// error and, completed with a result, result_url), as the API names
	// its fields.
	Body []byte
}

// DeliveryClaim says which deliveries ClaimDeliveries takes, and for how
// long.
type DeliveryClaim struct {
	// Now is the time of the claim, read from Store.Now (the clock that
	// wrote the deliveries' NextAttemptAt): pending deliveries whose
	// NextAttemptAt is not after it are due.
	Now time.Time
	// Lease is how long the claimer has for its attempt: the claimed
	// deliveries are due again at Now+Lease, for any claimer, unless
	// RecordDeliveryAttempt says otherwise first.
	Lease time.Duration
	// Limit is the most deliveries claimed; <= 0 means DefaultPageSize.
	Limit int
}

// DeliveryAttempt is the end of one attempt, for RecordDeliveryAttempt.
type DeliveryAttempt struct {
	// ID is the delivery's.
	ID string
	// Attempt is the claimed delivery's Attempts: the record applies only
	// while no later claim took the delivery.
	Attempt int
	// State is DeliveryDelivered, DeliveryPending (try again at
	// NextAttemptAt) or DeliveryFailed (given up).
	State DeliveryState
	// Status is the answer's HTTP status, 0 for none.
	Status int
	// Error says why the attempt failed; "" for a delivered one. It is
	// stored as valid UTF-8 without NUL bytes: each run of bytes that is
	// not valid UTF-8, and each NUL, becomes U+FFFD.
	Error string
	// At is when the attempt ended (DeliveredAt of a delivered one),
	// read from Store.Now.
	At time.Time
	// NextAttemptAt is when a pending delivery is due again, on the
	// store's clock (Store.Now), which the next claim compares it with.
	NextAttemptAt time.Time
	// NotAttempted hands the claim back without an attempt (State must be
	// DeliveryPending): the delivery's Attempts go back down by one, its
	// last status and error stay those of its last real attempt, and it
	// is due at NextAttemptAt. A deliverer that claimed more deliveries
	// for one receiver than it may send it at once gives them back so,
	// and a busy receiver never spends another job's attempts.
	NotAttempted bool
}
