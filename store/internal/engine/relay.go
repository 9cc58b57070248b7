package engine

// RelayTx holds the primitives that claim and mark a relay round (RelayRound, RelayBatch).
type RelayTx interface{}
