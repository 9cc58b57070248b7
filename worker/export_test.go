package worker

import amqp "github.com/rabbitmq/amqp091-go"

// OnControlConsumer makes w report its control queue and that queue's
// channel each time Run starts consuming it, so that tests know when
// cancels are heard and can break the consumer.
func OnControlConsumer(w *Worker, f func(queue string, ch *amqp.Channel)) { w.testHookControl = f }
