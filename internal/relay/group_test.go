package relay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

func outboxTask(job string, id int64, attempts, batch int) store.OutboxTask {
	return store.OutboxTask{JobID: job, TaskID: id, Type: "echo", Attempts: attempts, BatchSize: batch}
}

func groupIDs(groups [][]store.OutboxTask) [][]string {
	var out [][]string
	for _, g := range groups {
		var ids []string
		for _, t := range g {
			ids = append(ids, protocol.MessageID(t.JobID, t.TaskID))
		}
		out = append(out, ids)
	}
	return out
}

func TestGroupPacksConsecutiveTasksOfOneJob(t *testing.T) {
	t.Parallel()
	tasks := []store.OutboxTask{
		outboxTask("a", 1, 0, 3), outboxTask("a", 2, 0, 3), outboxTask("a", 3, 0, 3), outboxTask("a", 4, 0, 3),
		outboxTask("a", 7, 0, 3),                           // a gap in ids still packs
		outboxTask("a", 8, 2, 3), outboxTask("a", 9, 2, 3), // other attempts: a new group
		outboxTask("b", 1, 0, 1), outboxTask("b", 2, 0, 1), // batch size 1: one each
		outboxTask("c", 5, 0, 0), // 0 means 1
	}
	require.Equal(t, [][]string{
		{"a:1", "a:2", "a:3"}, {"a:4", "a:7"}, {"a:8", "a:9"}, {"b:1"}, {"b:2"}, {"c:5"},
	}, groupIDs(group(tasks)))
	require.Empty(t, group(nil))
}

// A message carries one generation: tasks of one job at different
// generations (some redriven or requeued, some not) never share one.
func TestGroupKeepsGenerationsApart(t *testing.T) {
	t.Parallel()
	at := func(id int64, generation int) store.OutboxTask {
		task := outboxTask("a", id, 1, 4)
		task.Generation = generation
		return task
	}
	tasks := []store.OutboxTask{at(1, 2), at(2, 2), at(3, 1), at(4, 2), at(5, 2)}
	require.Equal(t, [][]string{{"a:1", "a:2"}, {"a:3"}, {"a:4", "a:5"}}, groupIDs(group(tasks)))
}
