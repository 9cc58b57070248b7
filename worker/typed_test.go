package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
)

type resize struct {
	Key   string `json:"key"`
	Width int    `json:"width"`
}

type resized struct {
	Thumbnail string `json:"thumbnail"`
}

func resizeHandler(_ context.Context, t worker.Task, in resize) (resized, error) {
	return resized{Thumbnail: fmt.Sprintf("%s@%d:%d", in.Key, in.Width, t.TaskID)}, nil
}

func TestTypedDecodesThePayloadAndReturnsTheResult(t *testing.T) {
	t.Parallel()
	h := worker.Typed(resizeHandler)
	v, err := h(context.Background(), worker.Task{TaskID: 7, Payload: json.RawMessage(`{"key":"cat.png","width":64,"extra":true}`)})
	require.NoError(t, err)
	require.Equal(t, resized{Thumbnail: "cat.png@64:7"}, v, "fields In lacks are ignored; the task reaches h")
}

func TestTypedDecodeErrorIsPermanentAndNamesTheType(t *testing.T) {
	t.Parallel()
	called := false
	h := worker.Typed(func(context.Context, worker.Task, resize) (resized, error) {
		called = true
		return resized{}, nil
	})
	for name, payload := range map[string]string{
		"wrong type": `{"key":"cat.png","width":"wide"}`,
		"not JSON":   `{"key":`,
		"empty":      ``,
	} {
		_, err := h(context.Background(), worker.Task{Payload: json.RawMessage(payload)})
		require.Error(t, err, name)
		require.True(t, worker.IsPermanent(err), "%s: a payload that does not decode is never retried", name)
		require.ErrorContains(t, err, "worker_test.resize", "%s: the error names the type", name)
	}
	require.False(t, called, "h does not run on a payload that does not decode")

	_, err := h(context.Background(), worker.Task{Payload: json.RawMessage(`{"width":"wide"}`)})
	var typeErr *json.UnmarshalTypeError
	require.ErrorAs(t, err, &typeErr, "the decoding error is wrapped")
	require.Equal(t, "width", typeErr.Field)
}

func TestTypedNullPayloadIsTheZeroValue(t *testing.T) {
	t.Parallel()
	h := worker.Typed(func(_ context.Context, _ worker.Task, in *resize) (bool, error) {
		return in == nil, nil
	})
	v, err := h(context.Background(), worker.Task{Payload: json.RawMessage(`null`)})
	require.NoError(t, err)
	require.Equal(t, true, v)
}

func TestTypedNamesAnInterfaceType(t *testing.T) {
	t.Parallel()
	h := worker.Typed(func(context.Context, worker.Task, fmt.Stringer) (any, error) { return nil, nil })
	_, err := h(context.Background(), worker.Task{Payload: json.RawMessage(`{}`)})
	require.ErrorContains(t, err, "does not decode into fmt.Stringer: ", "the type, not the nil interface value")
}

func TestTypedPassesTheHandlersErrorOn(t *testing.T) {
	t.Parallel()
	errTransient := errors.New("storage unavailable")
	h := worker.Typed(func(_ context.Context, _ worker.Task, in resize) (resized, error) {
		if in.Width == 0 {
			return resized{}, worker.Permanent(errors.New("width 0"))
		}
		return resized{}, errTransient
	})
	_, err := h(context.Background(), worker.Task{Payload: json.RawMessage(`{"width":1}`)})
	require.ErrorIs(t, err, errTransient)
	require.False(t, worker.IsPermanent(err), "Typed does not mark h's errors")
	_, err = h(context.Background(), worker.Task{Payload: json.RawMessage(`{}`)})
	require.True(t, worker.IsPermanent(err))
}

func TestTypedNilHandlerPanics(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "worker: Typed with a nil handler", func() {
		worker.Typed[resize, resized](nil)
	})
}
