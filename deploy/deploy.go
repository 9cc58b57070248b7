// Package deploy holds deployment files that programs need as well as
// people: the RabbitMQ dead-letter worker watchdog (rabbitmq/) that the
// chaos cluster target runs as a deployment would.
package deploy

import _ "embed"

// DeadLetterWorkerRestart is rabbitmq/dlx-worker-restart.erl, the Erlang
// expression that, given to `rabbitmqctl -n NODE eval`, restarts the
// quorum-queue dead-letter workers of NODE that have held a dead letter
// unconfirmed for 30 s or more, and returns the names of their queues (an
// Erlang list of binaries; "[]" when none). RabbitMQ 3.10 and 3.11 need it
// in a cluster: docs/operations.md, "RabbitMQ cluster".
//
//go:embed rabbitmq/dlx-worker-restart.erl
var DeadLetterWorkerRestart string
