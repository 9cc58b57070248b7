package protocol_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/protocol"
)

// benchJobID is a job id of the length CreateJob generates (a ULID).
const benchJobID = "01HZX3K4M5N6P7Q8R9S0T1V2W3"

// benchPayloads are the payloads the benchmarks encode and decode: a small
// one, like most tasks carry, and one of 1 KiB.
var benchPayloads = []struct {
	name    string
	payload json.RawMessage
}{
	{"small", json.RawMessage(`{"i":12345}`)},
	{"1KiB", kibPayload()},
}

// kibPayload returns a JSON object of exactly 1024 bytes: a key and a
// string of filler.
func kibPayload() json.RawMessage {
	const frame = `{"key":"images/2024/05/00012345.jpg","pad":""}`
	p := json.RawMessage(strings.Replace(frame, `"pad":""`, `"pad":"`+strings.Repeat("x", 1024-len(frame))+`"`, 1))
	if len(p) != 1024 || !json.Valid(p) {
		panic(fmt.Sprintf("kibPayload is %d bytes, valid %v", len(p), json.Valid(p)))
	}
	return p
}

// benchResult is the result message a warren worker publishes for task
// 12345, with every optional field it fills.
func benchResult(result json.RawMessage) protocol.Result {
	started := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
	finished := started.Add(3 * time.Millisecond)
	return protocol.Result{
		JobID: benchJobID, TaskID: 12345, Result: result, Status: protocol.StatusCompleted,
		Worker: "worker-7.example.internal:4242", Attempt: 1, StartedAt: &started, FinishedAt: &finished,
	}
}

func BenchmarkEncodeTask(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			task := protocol.Task{JobID: benchJobID, TaskID: 12345, Payload: p.payload}
			body, err := protocol.EncodeTask(task)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.EncodeTask(task); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeTask(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			body, err := protocol.EncodeTask(protocol.Task{JobID: benchJobID, TaskID: 12345, Payload: p.payload})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.DecodeTask(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeResult(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			res := benchResult(p.payload)
			body, err := protocol.EncodeResult(res)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.EncodeResult(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeResult(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			body, err := protocol.EncodeResult(benchResult(p.payload))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.DecodeResult(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeTasks decodes the single-task bodies of
// BenchmarkDecodeTask through DecodeTasks, which workers call because a
// body may also be a batch.
func BenchmarkDecodeTasks(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			body, err := protocol.EncodeTask(protocol.Task{JobID: benchJobID, TaskID: 12345, Payload: p.payload})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := protocol.DecodeTasks(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeResults decodes the single-result bodies of
// BenchmarkDecodeResult through DecodeResults, which the aggregator calls
// because a body may also be a result batch.
func BenchmarkDecodeResults(b *testing.B) {
	for _, p := range benchPayloads {
		b.Run(p.name, func(b *testing.B) {
			body, err := protocol.EncodeResult(benchResult(p.payload))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.DecodeResults(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchBatchSize is the number of tasks in the batch benchmarks' messages.
const benchBatchSize = 32

// benchBatch returns a task batch of benchBatchSize small tasks and the
// result batch a worker answers it with.
func benchBatch() (protocol.Batch, protocol.ResultBatch) {
	tb := protocol.Batch{JobID: benchJobID}
	rb := protocol.ResultBatch{JobID: benchJobID}
	for i := range benchBatchSize {
		id := int64(12345 + i)
		tb.Tasks = append(tb.Tasks, protocol.BatchTask{TaskID: id, Payload: json.RawMessage(`{"i":12345}`)})
		r := benchResult(json.RawMessage(`{"i":12345}`))
		r.TaskID = id
		rb.Results = append(rb.Results, r)
	}
	return tb, rb
}

// BenchmarkBatch measures the batch messages of a job with batch_size 32,
// per message; divide by 32 for the cost per task.
func BenchmarkBatch(b *testing.B) {
	tb, rb := benchBatch()
	taskBody, err := protocol.EncodeBatch(tb)
	if err != nil {
		b.Fatal(err)
	}
	resultBody, err := protocol.EncodeResultBatch(rb)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("EncodeBatch", func(b *testing.B) {
		b.SetBytes(int64(len(taskBody)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := protocol.EncodeBatch(tb); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeTasks", func(b *testing.B) {
		b.SetBytes(int64(len(taskBody)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := protocol.DecodeTasks(taskBody); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EncodeResultBatch", func(b *testing.B) {
		b.SetBytes(int64(len(resultBody)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := protocol.EncodeResultBatch(rb); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeResults", func(b *testing.B) {
		b.SetBytes(int64(len(resultBody)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := protocol.DecodeResults(resultBody); err != nil {
				b.Fatal(err)
			}
		}
	})
}
