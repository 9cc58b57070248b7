package protocol

import (
	"encoding/json"
	"fmt"
)

// ControlCancel is the type of a control message that cancels a job.
const ControlCancel = "cancel"

// Control is the body of a control message, broadcast to every worker
// through the control exchange.
type Control struct {
	// Type is ControlCancel.
	Type string `json:"type"`
	// JobID is the job concerned.
	JobID string `json:"job_id"`
}

// EncodeControl returns the JSON body of a control message.
func EncodeControl(c Control) ([]byte, error) {
	if c.Type == "" || c.JobID == "" {
		return nil, fmt.Errorf("%w: control message needs a type and a job_id", ErrMalformed)
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
	if c.Type == "" || c.JobID == "" {
		return Control{}, fmt.Errorf("%w: control message needs a type and a job_id", ErrMalformed)
	}
	return c, nil
}
