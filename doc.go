// Package warren holds the public types shared by every part of warren, a
// system that splits a large job into independent tasks, runs them on many
// workers through RabbitMQ, and closes every job deterministically: each
// task accounted for exactly once and results reduced in task order,
// however often the broker redelivers and whichever process crashes.
//
// What users import:
//
//   - warren (this package): job and task states, Policy, shared errors.
//   - protocol: the wire format, for workers in any language.
//   - worker: write workers (Handle, HandleBatch, Typed); worker/workertest
//     runs a handler through the worker's own outcome decision, no broker.
//   - client: submit jobs and follow them through the HTTP API.
//   - server: the server as a library (server.New, Run), with custom
//     reducers from package reduce.
//   - store: the job store interface, its drivers store/sqlite and
//     store/postgres, store/storetest (their one conformance suite) and
//     store/open (a store by URL).
//   - reduce: reducers, built-in and custom, for a job's reduced result.
//   - bench: the measurement behind `warren bench`.
//
// Everything under internal/ (relay, aggregator, reconciler, dead letters,
// the retry decision, the AMQP mapping, broker plumbing, the HTTP API) is
// the engine the server owns; it may change without notice.
package warren
