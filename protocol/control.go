package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// Control message types (Control.Type).
const (
	// ControlCancel cancels job Control.JobID.
	ControlCancel = "cancel"
	// ControlPause pauses job Control.JobID, or every task of work queue
	// Control.Queue: a worker that hears it starts none of their tasks,
	// and puts back each one it receives through a retry tier without
	// spending an attempt (HeaderHeld), for PauseLease after the last
	// such message, or until a ControlResume.
	ControlPause = "pause"
	// ControlResume ends a ControlPause of the same job or queue.
	ControlResume = "resume"
)

// PauseRefresh and PauseLease time the pause broadcasts: a server sends
// ControlPause for every paused job and queue again every PauseRefresh,
// and a worker holds a pause for PauseLease after the last ControlPause
// it heard of it. A worker that connects while a job is paused learns of
// it within PauseRefresh; one that missed the ControlResume (it was
// disconnected then) runs the job's tasks again within PauseLease. The
// lease spans three refreshes, so that one or two lost broadcasts end
// no pause.
const (
	PauseRefresh = 10 * time.Second
	PauseLease   = 3*PauseRefresh + PauseRefresh/2
)

// Control is the body of a control message, broadcast to every worker
// through the control exchange.
type Control struct {
	// Type is ControlCancel, ControlPause or ControlResume; a worker
	// ignores a type it does not know.
	Type string `json:"type"`
	// JobID is the job concerned; "" for a message about a queue.
	JobID string `json:"job_id,omitempty"`
	// Queue is the work queue a ControlPause or ControlResume is about,
	// when it is not about a job ("" then). A message names a job or a
	// queue, never both.
	Queue string `json:"queue,omitempty"`
}

// EncodeControl returns the JSON body of a control message.
func EncodeControl(c Control) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// DecodeControl parses a control message body. Every error wraps
// ErrMalformed.
func DecodeControl(body []byte) (Control, error) {
	var c Control
	if err := decodeStrict(body, &c); err != nil {
		return Control{}, err
	}
	if err := c.check(); err != nil {
		return Control{}, err
	}
	return c, nil
}

// check is what makes c a control message: a type and one target, a
// job or a queue.
func (c Control) check() error {
	if c.Type == "" || (c.JobID == "") == (c.Queue == "") {
		return fmt.Errorf("%w: control message needs a type and a job_id or a queue (not both)", ErrMalformed)
	}
	return nil
}
