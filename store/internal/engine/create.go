package engine

// CreateTx holds the primitives that create a job (CreateJob) and settle webhook deliveries (ClaimDeliveries, RecordDeliveryAttempt).
type CreateTx interface{}
