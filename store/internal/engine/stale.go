package engine

// StaleTx holds the primitives that find and settle lost tasks (ReconcileStale) and expire jobs (DeleteExpiredJobs, DeleteJob, PurgeDeletedTasks).
type StaleTx interface{}
