package worker

import (
	"cmp"
	"errors"
	"slices"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// errSessionLost is an acker's answer once its session lost the
// connection: nothing was sent, and the broker redelivers the delivery.
var errSessionLost = errors.New("worker: the connection was lost; the delivery is not settled")

// errSessionEnded is the answer of an acker, or of the result publisher,
// once their session has ended.
var errSessionEnded = errors.New("worker: the session has ended; the delivery is not settled")

// acker is the one owner of the settlement of the task deliveries of one
// channel: every ack and nack of the channel goes through its goroutine,
// in the order it takes them. It acks what it is given together with one
// multiple-ack where that is safe, and with single acks where it is not:
// a multiple-ack at tag X settles every unsettled delivery of the channel
// with a tag up to X (the deliveries of all its consumers share one tag
// sequence, from 1), so it is sent only when each of them is settled
// already or being acked by it. A delivery done out of order is acked at
// once on its own, never held back behind an earlier one still running:
// it would hold a prefetch slot.
//
// Callers wait for their acks to be written; a session whose handlers
// have all returned has nothing left in its acker, so nothing is pending
// when the channel is closed.
type acker struct {
	ch   amqp.Acknowledger
	lost *atomic.Bool // the session's: once set, nothing is sent
	reqs chan *settleReq
	quit chan struct{}
	book ackBook
}

// settleReq is one call of ack or nack, answered in err once done is
// closed.
type settleReq struct {
	tags []uint64
	nack bool
	err  error
	done chan struct{}
}

// maxSettleRound bounds the requests one round of the acker takes.
const maxSettleRound = 1024

func newAcker(ch amqp.Acknowledger, lost *atomic.Bool) *acker {
	a := &acker{
		ch:   ch,
		lost: lost,
		reqs: make(chan *settleReq),
		quit: make(chan struct{}),
		book: ackBook{},
	}
	go a.run()
	return a
}

// ack acks the deliveries of tags, each unsettled until now, and returns
// once the acks are written: errSessionLost or errSessionEnded when
// nothing was sent, else the channel's error, if any.
func (a *acker) ack(tags ...uint64) error { return a.do(&settleReq{tags: tags}) }

// nack returns the delivery of tag to its queue, as ack.
func (a *acker) nack(tag uint64) error { return a.do(&settleReq{tags: []uint64{tag}, nack: true}) }

func (a *acker) do(r *settleReq) error {
	r.done = make(chan struct{})
	select {
	case a.reqs <- r:
	case <-a.quit:
		return errSessionEnded
	}
	<-r.done
	return r.err
}

// stop ends the acker's goroutine; later calls send nothing.
func (a *acker) stop() { close(a.quit) }

// run settles requests in rounds: one round takes every request waiting
// at its start, so what completes together is acked together, and an
// idle worker's ack goes out at once.
func (a *acker) run() {
	var (
		round []*settleReq
		tags  []uint64
		ops   []ackOp
	)
	for {
		select {
		case r := <-a.reqs:
			round = append(round[:0], r)
		case <-a.quit:
			return
		}
	more:
		for len(round) < maxSettleRound {
			select {
			case r := <-a.reqs:
				round = append(round, r)
			default:
				break more
			}
		}
		tags, ops = a.settle(round, tags[:0], ops[:0])
	}
}

// settle sends the nacks of round, in order, then the acks of the rest,
// and answers every request. tags and ops are scratch space, returned for
// the next round.
func (a *acker) settle(round []*settleReq, tags []uint64, ops []ackOp) ([]uint64, []ackOp) {
	defer func() {
		for _, r := range round {
			close(r.done)
		}
	}()
	if a.lost.Load() {
		for _, r := range round {
			r.err = errSessionLost
		}
		return tags, ops
	}
	// Nacks first: a multiple-ack of this round may then cover a nacked
	// tag, which the broker has already taken back.
	for _, r := range round {
		if r.nack {
			r.err = a.ch.Nack(r.tags[0], false, true)
			a.book.nacked(r.tags[0])
		} else {
			tags = append(tags, r.tags...)
		}
	}
	ops = a.book.plan(tags, ops)
	var err error
	for _, op := range ops {
		if e := a.ch.Ack(op.tag, op.multiple); e != nil && err == nil {
			err = e
		}
	}
	for _, r := range round {
		if !r.nack {
			r.err = err
		}
	}
	return tags, ops
}

// ackOp is one basic.ack to send.
type ackOp struct {
	tag      uint64
	multiple bool
}

// ackBook knows which delivery tags of one channel are settled, and
// plans the acks of newly done ones so that a multiple-ack never covers a
// delivery that is not settled. Tags start at 1 on a new channel. The
// tags settled above the floor are kept as ranges: while one long task
// holds the floor, the many tags settled after it are one range, not
// one entry each.
type ackBook struct {
	floor   uint64     // every tag up to floor is settled
	settled []tagRange // the settled tags above floor: sorted, apart, not touching
}

// tagRange is the delivery tags lo..hi.
type tagRange struct{ lo, hi uint64 }

// find returns the index of the first range of b.settled that starts at
// tag or after it.
func (b *ackBook) find(tag uint64) int {
	i, _ := slices.BinarySearchFunc(b.settled, tag, func(r tagRange, t uint64) int { return cmp.Compare(r.lo, t) })
	return i
}

// isSettled reports whether tag is settled.
func (b *ackBook) isSettled(tag uint64) bool {
	if tag <= b.floor {
		return true
	}
	i := b.find(tag)
	return (i < len(b.settled) && b.settled[i].lo == tag) || (i > 0 && b.settled[i-1].hi >= tag)
}

// add records tag, above the floor and not settled, as settled.
func (b *ackBook) add(tag uint64) {
	i := b.find(tag)
	joinsPrev := i > 0 && b.settled[i-1].hi+1 == tag
	joinsNext := i < len(b.settled) && b.settled[i].lo == tag+1
	switch {
	case joinsPrev && joinsNext:
		b.settled[i-1].hi = b.settled[i].hi
		b.settled = slices.Delete(b.settled, i, i+1)
	case joinsPrev:
		b.settled[i-1].hi = tag
	case joinsNext:
		b.settled[i].lo = tag
	default:
		b.settled = slices.Insert(b.settled, i, tagRange{tag, tag})
	}
}

// raise moves the floor over the settled range that follows it, if any.
func (b *ackBook) raise() bool {
	if len(b.settled) == 0 || b.settled[0].lo != b.floor+1 {
		return false
	}
	b.floor = b.settled[0].hi
	b.settled = slices.Delete(b.settled, 0, 1)
	return true
}

// nacked records tag as settled by a nack sent just now.
func (b *ackBook) nacked(tag uint64) {
	if b.isSettled(tag) {
		return
	}
	b.add(tag)
	b.raise()
}

// plan records tags as settled and appends to ops the acks that settle
// them: one ack, multiple when it covers more than one of them, for those
// that, with the tags settled before, follow the floor without a gap;
// a single ack for each of the others, which an unsettled tag below
// keeps out of a multiple-ack. It sorts tags, and skips a tag that is
// settled already rather than ack it twice (the broker would close the
// channel).
func (b *ackBook) plan(tags []uint64, ops []ackOp) []ackOp {
	slices.Sort(tags)
	tags = slices.Compact(tags)
	i := 0
	var (
		last uint64 // the highest of tags in the run from the floor
		n    int    // how many of tags are in that run
	)
	for {
		for i < len(tags) && tags[i] <= b.floor {
			i++ // settled already: never acked twice
		}
		if b.raise() {
			continue
		}
		if i < len(tags) && tags[i] == b.floor+1 {
			b.floor++
			last, n = b.floor, n+1
			i++
			continue
		}
		break
	}
	if n > 0 {
		ops = append(ops, ackOp{tag: last, multiple: n > 1})
	}
	for ; i < len(tags); i++ {
		if b.isSettled(tags[i]) {
			continue
		}
		b.add(tags[i])
		ops = append(ops, ackOp{tag: tags[i]})
	}
	return ops
}
