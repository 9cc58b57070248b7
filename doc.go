// Package warren holds the public types shared by every part of warren, a
// system that splits a large job into independent tasks, runs them on many
// workers through RabbitMQ, and closes every job deterministically: each
// task accounted for exactly once and results reduced in task order,
// however often the broker redelivers and whichever process crashes.
//
// The parts live in their own packages: protocol (wire format), broker
// (RabbitMQ), store (the job store and its SQLite and PostgreSQL
// implementations), relay (the outbox), worker (what users import to write
// workers) and aggregator (results, completion and reducers).
package warren
