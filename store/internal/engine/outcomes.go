package engine

// OutcomeTx holds the primitives that record outcomes (ApplyOutcomes) and find the jobs ready to close (JobsToClose).
type OutcomeTx interface{}
