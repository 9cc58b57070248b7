package engine

// ReopenTx holds the primitives that reopen failed work (RedriveJob, ReopenTask).
type ReopenTx interface{}
