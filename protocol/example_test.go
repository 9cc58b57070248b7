package protocol_test

import (
	"encoding/json"
	"fmt"

	"github.com/warrenhq/warren/protocol"
)

// A worker reads a task message and answers with a result message.
func Example() {
	task, err := protocol.DecodeTask([]byte(`{"job_id": "01JOB", "task_id": 7, "payload": {"n": 21}}`))
	if err != nil {
		panic(err)
	}
	var in struct{ N int }
	_ = json.Unmarshal(task.Payload, &in)

	body, _ := protocol.EncodeResult(protocol.Result{
		JobID:  task.JobID,
		TaskID: task.TaskID,
		Result: json.RawMessage(fmt.Sprint(in.N * 2)),
	})
	fmt.Println(protocol.MessageID(task.JobID, task.TaskID))
	fmt.Println(string(body))
	// Output:
	// 01JOB:7
	// {"job_id":"01JOB","task_id":7,"result":42}
}
