package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
)

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sub, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)

	job, err := b.client.Pause(ctx, sub.ID)
	require.NoError(t, err)
	require.True(t, job.Paused)
	require.NotNil(t, job.PausedAt)
	require.NotNil(t, job.Waiting)
	require.Equal(t, "paused", job.Waiting.Reason)
	got, err := b.client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.True(t, got.Paused)

	job, err = b.client.Resume(ctx, sub.ID)
	require.NoError(t, err)
	require.False(t, job.Paused)
	require.Nil(t, job.PausedAt)

	q, err := b.client.PauseQueue(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, client.QueuePause{Queue: "default", Paused: true, PausedAt: q.PausedAt}, q)
	require.NotNil(t, q.PausedAt)
	got, err = b.client.Get(ctx, sub.ID)
	require.NoError(t, err)
	require.False(t, got.Paused)
	require.Equal(t, "queue_paused", got.Waiting.Reason)
	q, err = b.client.ResumeQueue(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, client.QueuePause{Queue: "default"}, q)

	_, err = b.client.Cancel(ctx, sub.ID)
	require.NoError(t, err)
	_, err = b.client.Pause(ctx, sub.ID)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
	_, err = b.client.Resume(ctx, "nope")
	require.True(t, client.IsNotFound(err))
}
