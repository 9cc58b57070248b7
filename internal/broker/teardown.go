package broker

import (
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// Teardown is what DeleteInstallation found or did.
type Teardown struct {
	// Queues are the queues deleted, with the messages each held, in the
	// order deleted; Exchanges the exchanges deleted.
	Queues    []DeletedQueue
	Exchanges []string
	// Consumed are the queues that had consumers, when the teardown was
	// refused for them (nothing was deleted).
	Consumed []DeletedQueue
}

// DeletedQueue is one queue of a Teardown.
type DeletedQueue struct {
	Name string
	// Messages is how many messages it held (ready ones when it was
	// refused); Consumers how many consumers it had.
	Messages, Consumers int
}

// InstallationQueues are every queue of names that warren declares: the
// fixed ones, the default work queue's and workQueues' retry tiers of
// protocol.DefaultRetryTiers and of tiers, and workQueues (protocol queue
// names; the default one is skipped), each once.
func InstallationQueues(names protocol.Names, workQueues []string, tiers ...time.Duration) []string {
	all := slices.Concat(protocol.DefaultRetryTiers, tiers)
	queues := []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ, names.OutcomesQueue}
	add := func(q string) {
		if !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	for _, d := range all {
		add(names.RetryQueue(protocol.RetryTierName(d)))
	}
	for _, q := range workQueues {
		if q == protocol.DefaultQueue || protocol.CheckQueueName(q) != nil {
			continue
		}
		add(names.WorkQueue(q))
		for _, d := range all {
			add(names.QueueRetryQueue(q, protocol.RetryTierName(d)))
		}
	}
	return queues
}

// installationExchanges are the exchanges of names.
func installationExchanges(names protocol.Names) []string {
	return []string{names.JobsExchange, names.ResultsExchange, names.DeadLetterExchange, names.RetryExchange,
		names.ControlExchange, names.HeartbeatExchange}
}

// DeleteInstallation deletes every queue of InstallationQueues(names,
// workQueues, tiers...) and every exchange of names that exists, with
// their messages: a whole installation of one WARREN_PREFIX. It first
// reads every queue: unless force, a queue with consumers (a server or a
// worker of the installation is running) refuses the teardown, and
// nothing is deleted (Teardown.Consumed says which). Queues and exchanges
// that do not exist are left out of the Teardown.
func DeleteInstallation(conn *amqp.Connection, names protocol.Names, workQueues []string, force bool, tiers ...time.Duration) (Teardown, error) {
	var td Teardown
	p := NewProber(conn)
	defer p.Close()
	var existing []DeletedQueue
	for _, q := range InstallationQueues(names, workQueues, tiers...) {
		d, err := p.Depth(q)
		if IsNotFound(err) {
			continue
		}
		if err != nil {
			return td, err
		}
		existing = append(existing, DeletedQueue{Name: q, Messages: d.Ready, Consumers: d.Consumers})
		if d.Consumers > 0 {
			td.Consumed = append(td.Consumed, existing[len(existing)-1])
		}
	}
	if len(td.Consumed) > 0 && !force {
		return td, nil
	}
	td.Consumed = nil
	ch, err := conn.Channel()
	if err != nil {
		return td, fmt.Errorf("broker: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	for _, q := range existing {
		n, err := ch.QueueDelete(q.Name, false, false, false)
		if err != nil {
			return td, fmt.Errorf("broker: delete queue %q: %w", q.Name, err)
		}
		q.Messages = n
		td.Queues = append(td.Queues, q)
	}
	for _, x := range installationExchanges(names) {
		ok, err := exchangeExists(conn, x)
		if err != nil {
			return td, err
		}
		if !ok {
			continue
		}
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return td, fmt.Errorf("broker: delete exchange %q: %w", x, err)
		}
		td.Exchanges = append(td.Exchanges, x)
	}
	return td, nil
}

// exchangeExists reports whether exchange x exists, with a passive
// declare on a channel of its own (a missing exchange closes it).
func exchangeExists(conn *amqp.Connection, x string) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("broker: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	// The kind is not checked by a passive declare.
	err = ch.ExchangeDeclarePassive(x, amqp.ExchangeDirect, true, false, false, false, nil)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("broker: read exchange %q: %w", x, err)
	}
	return true, nil
}
