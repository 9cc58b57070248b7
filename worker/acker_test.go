package worker

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
)

// brokerModel is a channel's unacked deliveries as RabbitMQ keeps them,
// held to RabbitMQ's rules: an ack or a nack must name an unacked tag
// (else the broker closes the channel), and a multiple-ack at X settles
// every unacked tag up to X.
type brokerModel struct {
	t        *testing.T
	unacked  map[uint64]bool
	settles  map[uint64]int
	inFlight map[uint64]bool // tags whose ack the test asked for in this round
}

func (m *brokerModel) ack(op ackOp) {
	m.t.Helper()
	require.True(m.t, m.unacked[op.tag], "ack of tag %d, which is not unacked", op.tag)
	for tag := range m.unacked {
		if tag == op.tag || (op.multiple && tag < op.tag) {
			require.True(m.t, m.inFlight[tag], "ack %+v covers tag %d, which is unsettled or nacked", op, tag)
			delete(m.unacked, tag)
			m.settles[tag]++
		}
	}
}

func (m *brokerModel) nack(tag uint64) {
	m.t.Helper()
	require.True(m.t, m.unacked[tag], "nack of tag %d, which is not unacked", tag)
	delete(m.unacked, tag)
	m.settles[tag]++
}

// Deliveries done in random orders, in rounds of random sizes, some of
// them nacked: no multiple-ack covers a tag that is unsettled or nacked,
// every tag is settled exactly once, and every ack asked for in a round
// goes out in that round, whatever earlier tag is still unsettled.
func TestAckBookNeverCoversAnUnsettledTag(t *testing.T) {
	t.Parallel()
	multiples := 0
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(200)
		m := &brokerModel{t: t, unacked: map[uint64]bool{}, settles: map[uint64]int{}}
		// Deliveries arrive over time, and the book is never told of
		// them: it must not take a tag it has not seen for settled.
		delivered := 0
		order := rng.Perm(n)
		book := ackBook{}
		for len(order) > 0 {
			delivered = min(n, delivered+rng.IntN(20)+1)
			for tag := range delivered {
				if m.settles[uint64(tag+1)] == 0 {
					m.unacked[uint64(tag+1)] = true
				}
			}
			var acks []uint64
			m.inFlight = map[uint64]bool{}
			k := 1 + rng.IntN(max(1, len(order)/3))
			rest := order[:0:0]
			for _, i := range order {
				tag := uint64(i + 1)
				if k == 0 || i >= delivered {
					rest = append(rest, i)
					continue
				}
				k--
				if rng.IntN(5) == 0 {
					m.nack(tag)
					book.nacked(tag)
					continue
				}
				acks = append(acks, tag)
				m.inFlight[tag] = true
			}
			order = rest
			for _, op := range book.plan(acks, nil) {
				m.ack(op)
				if op.multiple {
					multiples++
				}
			}
			for _, tag := range acks {
				require.False(t, m.unacked[tag], "seed %d: tag %d was acked in a later round", seed, tag)
			}
		}
		require.Empty(t, m.unacked, "seed %d", seed)
		for tag := uint64(1); tag <= uint64(n); tag++ {
			require.Equal(t, 1, m.settles[tag], "seed %d: tag %d", seed, tag)
		}
		require.Empty(t, book.settled, "seed %d: every tag is under the floor", seed)
		require.Equal(t, uint64(n), book.floor, "seed %d", seed)
	}
	require.Positive(t, multiples, "no multiple-ack at all: the test cannot tell a safe one")
}

func TestAckBookPlans(t *testing.T) {
	t.Parallel()
	book := ackBook{}
	// In order: one multiple-ack.
	require.Equal(t, []ackOp{{tag: 4, multiple: true}}, book.plan([]uint64{3, 1, 4, 2}, nil))
	// 5 still runs: 6..8 are acked one by one, not held back behind it.
	require.Equal(t, []ackOp{{tag: 6}, {tag: 7}, {tag: 8}}, book.plan([]uint64{8, 6, 7}, nil))
	// 9 is nacked; 5 and 10 done together: the run 5..10 holds only
	// settled tags and those two, so one multiple-ack at 10 covers them.
	book.nacked(9)
	require.Equal(t, []ackOp{{tag: 10, multiple: true}}, book.plan([]uint64{10, 5}, nil))
	require.Equal(t, uint64(10), book.floor)
	// 5 alone after 6..8: a single ack.
	book = ackBook{floor: 4, settled: []tagRange{{6, 7}}}
	require.Equal(t, []ackOp{{tag: 5}}, book.plan([]uint64{5}, nil))
	require.Equal(t, uint64(7), book.floor)
	// A tag acked twice is acked once: the broker would close the channel.
	require.Empty(t, book.plan([]uint64{6, 7}, nil))
	require.Equal(t, []ackOp{{tag: 8}}, book.plan([]uint64{8, 8}, nil))
}

// An acker settles real deliveries, done in random order from many
// goroutines, some nacked (they come back, redelivered, and are then
// acked), without the broker closing the channel, which it does to an ack
// or nack of a tag that is not unacked (one settled twice, or covered by a
// multiple-ack before), and with every message acked in the end.
func TestAckerSettlesDeliveriesOnRabbitMQ(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	pub, err := broker.NewPublisher(amqptest.Dial(t), nil)
	require.NoError(t, err)
	defer func() { _ = pub.Close() }()
	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		require.NoError(t, pub.PublishAndWait(ctx, names.JobsExchange, "task", amqp.Publishing{
			MessageId: strconv.Itoa(i), DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(i)),
		}))
	}
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Qos(n, 0, false))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := ch.Consume(names.TasksQueue, "acker-test", false, false, false, false, nil)
	require.NoError(t, err)

	var lost atomic.Bool
	a := newAcker(ch, &lost)
	defer a.stop()
	var (
		wg            sync.WaitGroup
		acked, nacked atomic.Int64
	)
	for acked.Load() < n {
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-time.After(200 * time.Millisecond):
			continue // the last ones are being settled
		case reason := <-closed:
			t.Fatalf("the channel closed: %v", reason)
		}
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			if !d.Redelivered && rand.IntN(10) == 0 {
				require.NoError(t, a.nack(d.DeliveryTag))
				nacked.Add(1)
				return
			}
			require.NoError(t, a.ack(d.DeliveryTag))
			acked.Add(1)
		})
	}
	wg.Wait()
	// A round trip on the channel: had an ack been refused, the broker
	// would have closed it by now.
	_, err = ch.QueueDeclarePassive(names.TasksQueue, true, false, false, false, nil)
	require.NoError(t, err, "the broker closed the channel")
	require.NoError(t, ch.Close())
	require.Zero(t, amqptest.QueueDepth(t, conn, names.TasksQueue), "%d acked, %d nacked", acked.Load(), nacked.Load())
	require.Positive(t, nacked.Load())
}

// While one long task holds the floor, the tags settled after it, however
// many, are one range: the book does not grow with them.
func TestAckBookStaysSmallBehindALongTask(t *testing.T) {
	t.Parallel()
	var book ackBook
	const n = 100_000
	for tag := uint64(2); tag <= n; tag++ {
		require.Equal(t, []ackOp{{tag: tag}}, book.plan([]uint64{tag}, nil))
	}
	require.Equal(t, []tagRange{{2, n}}, book.settled)
	require.Equal(t, []ackOp{{tag: 1}}, book.plan([]uint64{1}, nil), "the long task: acked alone, its followers are")
	require.Empty(t, book.settled)
	require.Equal(t, uint64(n), book.floor)
}
