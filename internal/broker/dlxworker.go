package broker

// DeadLetterWorkerConfirmTimeout is the dead_letter_worker_publisher_confirm_timeout,
// in milliseconds, that warren's deployment sets on RabbitMQ 3.10 and later
// (DeadLetterWorkerConfig).
const DeadLetterWorkerConfirmTimeout = 10000

// DeadLetterWorkerConfig is an advanced.config for RabbitMQ nodes that
// bounds how long a quorum queue's at-least-once dead-letter worker holds a
// message whose target queue rejected it: such a message is sent again only
// once dead_letter_worker_publisher_confirm_timeout has passed (RabbitMQ's
// default is 3 minutes). docs/operations.md ("RabbitMQ cluster") says when
// that happens.
const DeadLetterWorkerConfig = "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 10000}]}].\n"
