package aggregator

// OnHeld makes a report the size of the batch it holds each time the
// batch grows, so that tests know when deliveries are in hand rather than
// only delivered to the channel. Call it before Run.
func OnHeld(a *Aggregator, f func(n int)) { a.testHookHeld = f }
