package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// PublishCancel broadcasts that job jobID is cancelled to every running
// worker, through the control exchange (the message is wire.Cancel), and
// waits for the broker's confirm. With no worker bound the broker returns
// the message; that is success, since no worker has anything to skip.
func PublishCancel(ctx context.Context, p *Publisher, names protocol.Names, jobID string) error {
	out, err := wire.Cancel(names, jobID)
	if err != nil {
		return fmt.Errorf("broker: cancel job %q: %w", jobID, err)
	}
	err = p.PublishAndWait(ctx, out.Exchange, out.Key, out.Msg)
	if err != nil && !errors.Is(err, ErrUnroutable) {
		return fmt.Errorf("broker: broadcast the cancel of job %q: %w", jobID, err)
	}
	return nil
}

// PublishPause broadcasts a pause or a resume (c, a protocol.ControlPause
// or protocol.ControlResume of a job or a queue) to every running worker
// through the control exchange, and waits for the broker's confirm. With
// no worker bound the broker returns the message; that is success, since
// no worker holds anything.
func PublishPause(ctx context.Context, p *Publisher, names protocol.Names, c protocol.Control) error {
	build := wire.Pause
	if c.Type == protocol.ControlResume {
		build = wire.Resume
	}
	out, err := build(names, c.JobID, c.Queue)
	if err != nil {
		return fmt.Errorf("broker: %s: %w", c.Type, err)
	}
	err = p.PublishAndWait(ctx, out.Exchange, out.Key, out.Msg)
	if err != nil && !errors.Is(err, ErrUnroutable) {
		return fmt.Errorf("broker: broadcast the %s of %s: %w", c.Type, out.Msg.MessageId, err)
	}
	return nil
}
