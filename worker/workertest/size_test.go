package workertest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// A result over the limit is Failed with result_too_large, as the worker
// fails it: by default over protocol.DefaultMaxResultBytes, with RunWorker
// over the worker's own limit, and with Opts over Opts.MaxResultBytes.
func TestWorkertestAResultOverTheLimitFails(t *testing.T) {
	t.Parallel()
	big := func(n int) worker.HandlerFunc {
		return func(context.Context, worker.Task) (any, error) { return strings.Repeat("x", n), nil }
	}
	ctx := context.Background()
	r := workertest.Run(ctx, big(protocol.DefaultMaxResultBytes), worker.Task{}, nil)
	require.Equal(t, workertest.Failed, r.Action)
	require.Equal(t, protocol.ReasonResultTooLarge, r.Reason)
	require.Equal(t, workertest.Completed, workertest.Run(ctx, big(protocol.DefaultMaxResultBytes-2), worker.Task{}, nil).Action)

	r = workertest.Run(ctx, big(100), worker.Task{}, &workertest.Opts{MaxResultBytes: 50})
	require.Equal(t, workertest.Failed, r.Action)
	require.ErrorContains(t, r.Err, "the result is 102 bytes of JSON, over this worker's limit of 50")

	w, err := worker.New(worker.Config{MaxResultBytes: 10})
	require.NoError(t, err)
	w.Handle("big", big(20))
	r = workertest.RunWorker(ctx, w, worker.Task{Type: "big"}, nil)
	require.Equal(t, workertest.Failed, r.Action)
	require.Equal(t, protocol.ReasonResultTooLarge, r.Reason)

	out := workertest.RunBatch(ctx, func(_ context.Context, ts []worker.Task) []worker.Outcome {
		return []worker.Outcome{{Value: "ok"}, {Value: strings.Repeat("y", 60)}}
	}, []worker.Task{{}, {}}, &workertest.Opts{MaxResultBytes: 50})
	require.Equal(t, workertest.Completed, out[0].Action)
	require.Equal(t, workertest.Failed, out[1].Action)
}
